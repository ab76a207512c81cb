package envplugin

// Conversions between the environment kind's types and its wire messages,
// beside the kind as Nomad keeps them (plugins/device/util.go). Strings
// bound for a model are made valid UTF-8 here instead of failing the call.

import (
	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/sdk/wire/rlhostpb"
)

// fromMessage encodes a chat message. Chat text is destined for a model
// and proto3 strings must be UTF-8, so invalid bytes (raw program output an
// environment forwarded) become U+FFFD here instead of failing the call.
func fromMessage(m core.Message) *rlhostpb.ChatMessage {
	out := &rlhostpb.ChatMessage{Role: rlhostpb.ValidUTF8(string(m.Role)), Content: rlhostpb.ValidUTF8(m.Content), Name: rlhostpb.ValidUTF8(m.Name), ToolCallId: rlhostpb.ValidUTF8(m.ToolCallID)}
	for _, tc := range m.ToolCalls {
		out.ToolCalls = append(out.ToolCalls, &rlhostpb.ToolCall{Id: rlhostpb.ValidUTF8(tc.ID), Type: rlhostpb.ValidUTF8(tc.Type), Function: &rlhostpb.FunctionCall{Name: rlhostpb.ValidUTF8(tc.Function.Name), Arguments: rlhostpb.ValidUTF8(tc.Function.Arguments)}})
	}
	return out
}

// toMessage decodes a chat message.
func toMessage(m *rlhostpb.ChatMessage) core.Message {
	out := core.Message{Role: core.Role(m.GetRole()), Content: m.GetContent(), Name: m.GetName(), ToolCallID: m.GetToolCallId()}
	for _, tc := range m.GetToolCalls() {
		out.ToolCalls = append(out.ToolCalls, core.ToolCall{ID: tc.GetId(), Type: tc.GetType(), Function: core.FunctionCall{Name: tc.GetFunction().GetName(), Arguments: tc.GetFunction().GetArguments()}})
	}
	return out
}

// fromMessages encodes a list of messages.
func fromMessages(ms []core.Message) []*rlhostpb.ChatMessage {
	out := make([]*rlhostpb.ChatMessage, 0, len(ms))
	for _, m := range ms {
		out = append(out, fromMessage(m))
	}
	return out
}

// toMessages decodes a list of messages.
func toMessages(ms []*rlhostpb.ChatMessage) []core.Message {
	if len(ms) == 0 {
		return nil
	}
	out := make([]core.Message, 0, len(ms))
	for _, m := range ms {
		out = append(out, toMessage(m))
	}
	return out
}

// fromTools encodes tool specs.
func fromTools(ts []core.ToolSpec) []*rlhostpb.ToolSpec {
	var out []*rlhostpb.ToolSpec
	for _, t := range ts {
		out = append(out, &rlhostpb.ToolSpec{Type: rlhostpb.ValidUTF8(t.Type), Name: rlhostpb.ValidUTF8(t.Function.Name), Description: rlhostpb.ValidUTF8(t.Function.Description), ParametersJson: t.Function.Parameters})
	}
	return out
}

// toTools decodes tool specs.
func toTools(ts []*rlhostpb.ToolSpec) []core.ToolSpec {
	var out []core.ToolSpec
	for _, t := range ts {
		out = append(out, core.ToolSpec{Type: t.GetType(), Function: core.FunctionSpec{Name: t.GetName(), Description: t.GetDescription(), Parameters: t.GetParametersJson()}})
	}
	return out
}

// fromTask encodes a task.
func fromTask(t core.Task) *rlhostpb.Task {
	return &rlhostpb.Task{Id: rlhostpb.ValidUTF8(t.ID), Prompt: rlhostpb.ValidUTF8(t.Prompt), DataJson: t.Data}
}

// toTask decodes a task.
func toTask(t *rlhostpb.Task) core.Task {
	return core.Task{ID: t.GetId(), Prompt: t.GetPrompt(), Data: t.GetDataJson()}
}

// fromObservation encodes an observation.
func fromObservation(o Observation) *rlhostpb.Observation {
	return &rlhostpb.Observation{
		Messages: fromMessages(o.Messages), Tools: fromTools(o.Tools), Done: o.Done, Reward: o.Reward,
		Metrics: rlhostpb.ValidUTF8Keys(o.Metrics), Info: rlhostpb.ValidUTF8Map(o.Info), FinishReason: rlhostpb.ValidUTF8(o.FinishReason),
	}
}

// toObservation decodes an observation.
func toObservation(o *rlhostpb.Observation) Observation {
	return Observation{
		Messages: toMessages(o.GetMessages()), Tools: toTools(o.GetTools()), Done: o.GetDone(), Reward: o.GetReward(),
		Metrics: o.GetMetrics(), Info: o.GetInfo(), FinishReason: o.GetFinishReason(),
	}
}
