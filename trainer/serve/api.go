package serve

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/rlhost/rlhost/core"
)

// chatRequest is the subset of OpenAI's chat completion request (plus
// vLLM's top_k and return_token_ids) the server understands. Unknown
// fields are ignored, as OpenAI-compatible servers do.
type chatRequest struct {
	Model               string          `json:"model"`
	Messages            []wireMessage   `json:"messages"`
	Tools               []core.ToolSpec `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	N                   *int            `json:"n"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	TopK                *int            `json:"top_k"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Stop                json.RawMessage `json:"stop"`
	Seed                *int64          `json:"seed"`
	Logprobs            *bool           `json:"logprobs"`
	TopLogprobs         *int            `json:"top_logprobs"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	ReturnTokenIDs bool `json:"return_token_ids"`
}

// wireMessage is a chat message as clients send it: content may be a
// string, null, or an array of parts.
type wireMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	Name       string          `json:"name"`
	ToolCalls  []core.ToolCall `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
}

func (m wireMessage) toCore(i int) (core.Message, error) {
	switch m.Role {
	case "system", "developer", "user", "assistant", "tool":
	default:
		return core.Message{}, fmt.Errorf("messages[%d].role %q: want system, user, assistant or tool", i, m.Role)
	}
	role := m.Role
	if role == "developer" {
		role = "system"
	}
	text, err := contentText(m.Content)
	if err != nil {
		return core.Message{}, fmt.Errorf("messages[%d].content: %w", i, err)
	}
	return core.Message{Role: core.Role(role), Content: text, Name: m.Name, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID}, nil
}

// contentText flattens OpenAI content: a string, null, or text parts.
func contentText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("want a string or an array of text parts")
	}
	var b strings.Builder
	for j, p := range parts {
		if p.Type != "text" || p.Text == nil {
			return "", fmt.Errorf("part %d has type %q: only text parts are supported", j, p.Type)
		}
		b.WriteString(*p.Text)
	}
	return b.String(), nil
}

// stopStrings decodes stop: absent, null, a string, or a list of strings.
func stopStrings(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		if s == "" {
			return nil, nil
		}
		return []string{s}, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("stop: want a string or a list of strings")
	}
	var out []string
	for _, s := range list {
		if s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

// toolChoice decodes tool_choice: absent, "auto" and "none" are supported.
func toolChoice(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "auto", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil && (s == "auto" || s == "none") {
		return s, nil
	}
	return "", fmt.Errorf("tool_choice %s is not supported: use \"auto\" or \"none\"", string(raw))
}

type chatResponse struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	SystemFingerprint string       `json:"system_fingerprint"`
	Choices           []choiceJSON `json:"choices"`
	Usage             *usageJSON   `json:"usage,omitempty"`
	PromptTokenIDs    []int        `json:"prompt_token_ids,omitempty"`
}

type choiceJSON struct {
	Index        int           `json:"index"`
	Message      *messageJSON  `json:"message,omitempty"`
	Delta        *messageJSON  `json:"delta,omitempty"`
	Logprobs     *logprobsJSON `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
	TokenIDs     []int         `json:"token_ids,omitempty"`
}

type messageJSON struct {
	Role      string         `json:"role,omitempty"`
	Content   *string        `json:"content,omitempty"`
	ToolCalls []toolCallJSON `json:"tool_calls,omitempty"`
}

type toolCallJSON struct {
	Index    *int              `json:"index,omitempty"` // streaming deltas only
	ID       string            `json:"id"`
	Type     string            `json:"type"`
	Function core.FunctionCall `json:"function"`
}

type logprobsJSON struct {
	Content []tokenLogprobJSON `json:"content"`
}

type tokenLogprobJSON struct {
	Token       string           `json:"token"`
	Logprob     float32          `json:"logprob"`
	Bytes       []int            `json:"bytes"`
	TopLogprobs []topLogprobJSON `json:"top_logprobs"`
}

type topLogprobJSON struct {
	Token   string  `json:"token"`
	Logprob float32 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

type usageJSON struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// apiError is OpenAI's error body.
type apiError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// writeError answers with OpenAI's error body; param names the request
// field at fault ("" leaves it null), as vLLM does.
func writeError(w http.ResponseWriter, status int, typ, code, param, msg string) {
	e := apiError{Message: msg, Type: typ}
	if code != "" {
		e.Code = &code
	}
	if param != "" {
		e.Param = &param
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]apiError{"error": e})
}
