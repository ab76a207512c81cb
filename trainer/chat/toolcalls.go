package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/rlhost/rlhost/core"
)

const (
	toolCallOpen  = "<tool_call>"
	toolCallClose = "</tool_call>"
)

// ParseToolCalls extracts the <tool_call>{"name": ..., "arguments": ...}</tool_call>
// blocks a Qwen model generates. content is the text outside the blocks with
// surrounding whitespace trimmed; calls get IDs call_0, call_1, ... in order.
//
// A block whose JSON is malformed still yields a call, so that the
// environment sees what the model sent: Name is recovered when the "name"
// field can be read, and Arguments is then the block's raw text. Each
// such block adds one error to problems; nothing here panics.
func ParseToolCalls(text string) (content string, calls []core.ToolCall, problems []error) {
	var rest strings.Builder
	for n := 0; ; n++ {
		open := strings.Index(text, toolCallOpen)
		if open < 0 {
			break
		}
		rest.WriteString(text[:open])
		body := text[open+len(toolCallOpen):]
		end := strings.Index(body, toolCallClose)
		if end < 0 {
			problems = append(problems, fmt.Errorf("tool call %d: no closing %s (truncated output?)", n, toolCallClose))
			text = ""
		} else {
			text = body[end+len(toolCallClose):]
			body = body[:end]
		}
		call, err := parseCall(strings.TrimSpace(body))
		call.ID = fmt.Sprintf("call_%d", n)
		call.Type = "function"
		if err != nil {
			problems = append(problems, fmt.Errorf("tool call %d: %w", n, err))
		}
		calls = append(calls, call)
	}
	rest.WriteString(text)
	content = strings.TrimSpace(rest.String())
	if strings.Contains(content, toolCallClose) {
		problems = append(problems, fmt.Errorf("stray %s without an opening %s", toolCallClose, toolCallOpen))
	}
	return content, calls, problems
}

// parseCall decodes one block body. Arguments that are an object (or any
// JSON value) are kept as their raw JSON text; arguments given as a string
// holding JSON, which some models emit, are unwrapped to that string.
func parseCall(body string) (core.ToolCall, error) {
	var call core.ToolCall
	var raw struct {
		Name      *string         `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	dec := json.NewDecoder(strings.NewReader(body))
	if err := dec.Decode(&raw); err != nil {
		call.Function.Name = salvageName(body)
		call.Function.Arguments = body
		return call, fmt.Errorf("malformed JSON: %w", err)
	}
	if dec.More() {
		call.Function.Arguments = body
		if raw.Name != nil {
			call.Function.Name = *raw.Name
		}
		return call, fmt.Errorf("unexpected text after the JSON object")
	}
	if raw.Name == nil || *raw.Name == "" {
		call.Function.Arguments = body
		return call, fmt.Errorf("missing \"name\"")
	}
	call.Function.Name = *raw.Name
	args := bytes.TrimSpace(raw.Arguments)
	switch {
	case len(args) == 0 || string(args) == "null":
		call.Function.Arguments = "{}"
	case args[0] == '"':
		var s string
		if err := json.Unmarshal(args, &s); err != nil {
			return call, fmt.Errorf("arguments: %w", err)
		}
		call.Function.Arguments = s
		if !json.Valid([]byte(s)) {
			return call, fmt.Errorf("arguments string is not JSON: %q", s)
		}
	default:
		call.Function.Arguments = string(args)
	}
	return call, nil
}

// salvageName finds `"name": "..."` in malformed JSON, so that a bad call
// can still be attributed to a tool in logs and rewards.
func salvageName(body string) string {
	i := strings.Index(body, `"name"`)
	if i < 0 {
		return ""
	}
	s := strings.TrimLeft(body[i+len(`"name"`):], " \t\r\n")
	if !strings.HasPrefix(s, ":") {
		return ""
	}
	s = strings.TrimLeft(s[1:], " \t\r\n")
	if !strings.HasPrefix(s, `"`) {
		return ""
	}
	var name string
	dec := json.NewDecoder(strings.NewReader(s))
	if err := dec.Decode(&name); err != nil {
		return ""
	}
	return name
}
