package core

import "encoding/json"

// Role is the author of a chat message, using OpenAI's names.
type Role string

// The four roles an OpenAI-style conversation uses.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one chat turn in OpenAI Chat Completions shape, so that
// trajectories can be fed back to any OpenAI-compatible tooling unchanged.
type Message struct {
	Role       Role       `json:"role"`
	Content    string     `json:"content"`
	Name       string     `json:"name,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

// ToolCall is a function call requested by the assistant. Arguments stay a
// raw JSON string, as on the wire, because models do emit malformed JSON and
// the environment must be able to see and report exactly what was sent.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"` // always "function" today
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function and carries its arguments verbatim.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// ToolSpec describes a tool offered to the policy (OpenAI "tools" entry).
type ToolSpec struct {
	Type     string       `json:"type"` // "function"
	Function FunctionSpec `json:"function"`
}

// FunctionSpec is a function tool; Parameters is a JSON Schema object.
type FunctionSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// Usage is the token accounting an OpenAI-compatible server reports.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}
