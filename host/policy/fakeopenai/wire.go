package fakeopenai

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/rlhost/rlhost/core"
)

// ChatRequest is a decoded Chat Completions request. Messages and tools use
// the core types, whose JSON tags are OpenAI's; Body keeps the exact bytes
// so tests can check what went over the wire.
type ChatRequest struct {
	Model               string          `json:"model"`
	Messages            []core.Message  `json:"messages"`
	Tools               []core.ToolSpec `json:"tools,omitempty"`
	ToolChoice          json.RawMessage `json:"tool_choice,omitempty"`
	ParallelToolCalls   json.RawMessage `json:"parallel_tool_calls,omitempty"`
	N                   *int            `json:"n,omitempty"`
	Temperature         *float64        `json:"temperature,omitempty"`
	TopP                *float64        `json:"top_p,omitempty"`
	MaxTokens           *int            `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int            `json:"max_completion_tokens,omitempty"`
	Seed                *int64          `json:"seed,omitempty"`
	Stop                json.RawMessage `json:"stop,omitempty"` // a string or an array of strings
	Stream              bool            `json:"stream"`
	User                string          `json:"user,omitempty"`

	// Seq is the request's 1-based arrival number at this server.
	Seq int `json:"-"`
	// Header holds the HTTP headers (Authorization included).
	Header http.Header `json:"-"`
	// Body is the raw request body.
	Body []byte `json:"-"`
}

// NumChoices is the n the client asked for (1 when absent).
func (r ChatRequest) NumChoices() int {
	if r.N == nil {
		return 1
	}
	return *r.N
}

// Turn is the number of assistant messages in the conversation, i.e. the
// index of the assistant turn being asked for.
func (r ChatRequest) Turn() int {
	n := 0
	for _, m := range r.Messages {
		if m.Role == core.RoleAssistant {
			n++
		}
	}
	return n
}

// LastMessage is the final message of the conversation (zero when empty).
func (r ChatRequest) LastMessage() core.Message {
	if len(r.Messages) == 0 {
		return core.Message{}
	}
	return r.Messages[len(r.Messages)-1]
}

// APIKey is the bearer token the client sent ("" when none).
func (r ChatRequest) APIKey() string {
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
}

// The reply shapes below mirror OpenAI's chat.completion object field by field.

type wireResponse struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []wireChoice `json:"choices"`
	Usage             core.Usage   `json:"usage"`
	SystemFingerprint string       `json:"system_fingerprint"`
}

type wireChoice struct {
	Index        int             `json:"index"`
	Message      wireMessage     `json:"message"`
	Logprobs     json.RawMessage `json:"logprobs"`
	FinishReason string          `json:"finish_reason"`
}

type wireMessage struct {
	Role      string          `json:"role"`
	Content   *string         `json:"content"` // null when the reply is only tool calls
	Refusal   *string         `json:"refusal"`
	ToolCalls []core.ToolCall `json:"tool_calls,omitempty"`
}

type wireError struct {
	Error wireErrorBody `json:"error"`
}

type wireErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// wireModelList is GET /v1/models' answer.
type wireModelList struct {
	Object string      `json:"object"`
	Data   []wireModel `json:"data"`
}

type wireModel struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}
