package policy

import (
	"encoding/json"
	"strings"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rlhost/rlhost/core"
)

// emptyParameters is what an absent tool schema means to OpenAI ("a function
// with an empty parameter list"); sent explicitly because go-openai would
// otherwise send "parameters": null, which some servers refuse.
var emptyParameters = json.RawMessage(`{"type":"object","properties":{}}`)

func toOpenAIMessages(msgs []core.Message) []openai.ChatCompletionMessage {
	out := make([]openai.ChatCompletionMessage, len(msgs))
	for i, m := range msgs {
		out[i] = openai.ChatCompletionMessage{
			Role:       string(m.Role),
			Content:    m.Content,
			Name:       m.Name,
			ToolCallID: m.ToolCallID,
			ToolCalls:  toOpenAIToolCalls(m.ToolCalls),
		}
	}
	return out
}

func toOpenAIToolCalls(calls []core.ToolCall) []openai.ToolCall {
	if len(calls) == 0 {
		return nil
	}
	out := make([]openai.ToolCall, len(calls))
	for i, c := range calls {
		typ := c.Type
		if typ == "" {
			typ = string(openai.ToolTypeFunction)
		}
		out[i] = openai.ToolCall{
			ID:   c.ID,
			Type: openai.ToolType(typ),
			// Arguments is a string on both sides: it crosses as is, even
			// when it is not valid JSON.
			Function: openai.FunctionCall{Name: c.Function.Name, Arguments: c.Function.Arguments},
		}
	}
	return out
}

func toOpenAITools(tools []core.ToolSpec) []openai.Tool {
	if len(tools) == 0 {
		return nil
	}
	out := make([]openai.Tool, len(tools))
	for i, t := range tools {
		typ := t.Type
		if typ == "" {
			typ = string(openai.ToolTypeFunction)
		}
		params := t.Function.Parameters
		if len(params) == 0 {
			params = emptyParameters
		}
		out[i] = openai.Tool{
			Type: openai.ToolType(typ),
			Function: &openai.FunctionDefinition{
				Name:        t.Function.Name,
				Description: t.Function.Description,
				Parameters:  params,
			},
		}
	}
	return out
}

func fromOpenAIChoice(c openai.ChatCompletionChoice) Choice {
	m := c.Message
	msg := core.Message{Role: core.RoleAssistant, Content: m.Content, Name: m.Name}
	if msg.Content == "" && len(m.MultiContent) > 0 {
		// Some servers answer with content parts; keep their text.
		var b strings.Builder
		for _, p := range m.MultiContent {
			b.WriteString(p.Text)
		}
		msg.Content = b.String()
	}
	for _, tc := range m.ToolCalls {
		msg.ToolCalls = append(msg.ToolCalls, core.ToolCall{
			ID:       tc.ID,
			Type:     string(tc.Type),
			Function: core.FunctionCall{Name: tc.Function.Name, Arguments: tc.Function.Arguments},
		})
	}
	return Choice{Message: msg, FinishReason: string(c.FinishReason)}
}
