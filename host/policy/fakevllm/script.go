package fakevllm

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/rlhost/rlhost/core"
)

// chatRequest is the part of a chat completion request the Agent path
// reads.
type chatRequest struct {
	Messages            []core.Message  `json:"messages"`
	Tools               []core.ToolSpec `json:"tools"`
	N                   *int            `json:"n"`
	Seed                *int64          `json:"seed"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	ReturnTokenIDs      bool            `json:"return_token_ids"`
	LogProbs            bool            `json:"logprobs"`
}

// script answers a chat request with Options.Agent, as vLLM's
// chat.completion with the fake's token ids and log-probs, and says what
// the answer costs the throughput model.
func (s *Server) script(model string, body []byte) (int, string, *work) {
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return http.StatusBadRequest, errorBody(http.StatusBadRequest, "Bad Request", fmt.Sprintf("1 validation error: %v", err)), nil
	}
	n := 1
	if req.N != nil {
		n = *req.N
	}
	if n < 1 {
		return http.StatusBadRequest, errorBody(http.StatusBadRequest, "Bad Request", fmt.Sprintf("n must be at least 1, got %d", n)), nil
	}
	limit := 0
	for _, l := range []*int{req.MaxTokens, req.MaxCompletionTokens} {
		if l != nil && *l > 0 {
			limit = *l
		}
	}
	seed := int64(0)
	if req.Seed != nil {
		seed = *req.Seed
	}
	p := renderPrompt(req.Messages, req.Tools)
	replies := s.opts.Agent(AgentRequest{Model: model, Messages: req.Messages, Tools: req.Tools, N: n, Seed: seed})
	if len(replies) != n {
		return http.StatusInternalServerError, errorBody(http.StatusInternalServerError, "InternalServerError",
			fmt.Sprintf("fakevllm: the agent wrote %d replies for n = %d", len(replies), n)), nil
	}
	wk := &work{prompt: len(p.ids)}
	if s.cache != nil {
		wk.cached = min(s.cache.cached(p.boundaries), len(p.ids))
	}
	choices := make([]map[string]any, n)
	completion := 0
	for i, m := range replies {
		m.Role = core.RoleAssistant
		ids := replyTokens(m)
		finish := "stop"
		if len(m.ToolCalls) > 0 {
			finish = "tool_calls"
		}
		if limit > 0 && len(ids) > limit {
			// Cut off mid-reply: whatever tool call it was writing is lost.
			ids, finish = ids[:limit], "length"
			m.ToolCalls = nil
			m.Content = m.Content[:min(len(m.Content), limit*bytesPerTok)]
		}
		if s.cache != nil {
			s.cache.add(p.after(m))
		}
		wk.lengths = append(wk.lengths, len(ids))
		completion += len(ids)
		msg := map[string]any{"role": "assistant", "content": m.Content}
		if len(m.ToolCalls) > 0 {
			msg["tool_calls"] = m.ToolCalls
		}
		ch := map[string]any{"index": i, "message": msg, "finish_reason": finish, "logprobs": nil}
		if req.ReturnTokenIDs {
			ch["token_ids"] = ids
		}
		if req.LogProbs {
			content := make([]map[string]any, len(ids))
			for k, id := range ids {
				content[k] = map[string]any{"token": fmt.Sprintf("token_id:%d", id), "logprob": logProb(seed, i, k), "bytes": nil, "top_logprobs": []any{}}
			}
			ch["logprobs"] = map[string]any{"content": content}
		}
		choices[i] = ch
	}
	resp := map[string]any{"id": fmt.Sprintf("chatcmpl-fake-%x", uint64(mix(seed, int64(len(p.ids))))), "object": "chat.completion", "created": 0,
		"model": model, "choices": choices,
		"usage": map[string]int{"prompt_tokens": len(p.ids), "completion_tokens": completion, "total_tokens": len(p.ids) + completion}}
	if req.ReturnTokenIDs {
		resp["prompt_token_ids"] = p.ids
	}
	b, _ := json.Marshal(resp)
	return http.StatusOK, string(b), wk
}

// errorBody is vLLM's ErrorResponse as text.
func errorBody(status int, typ, msg string) string {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": status}})
	return string(b)
}

// workOf reads what an answer made elsewhere (Respond, Upstream) costs
// the throughput model from its usage and token ids.
func workOf(resp map[string]json.RawMessage) *work {
	var u struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	}
	_ = json.Unmarshal(resp["usage"], &u)
	var choices []struct {
		TokenIDs []int `json:"token_ids"`
	}
	_ = json.Unmarshal(resp["choices"], &choices)
	wk := &work{prompt: u.PromptTokens}
	known := 0
	for _, c := range choices {
		known += len(c.TokenIDs)
	}
	for _, c := range choices {
		n := len(c.TokenIDs)
		if known != u.CompletionTokens {
			n = u.CompletionTokens / len(choices)
		}
		wk.lengths = append(wk.lengths, n)
	}
	return wk
}
