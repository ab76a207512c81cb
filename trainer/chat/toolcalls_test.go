package chat

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/rlhost/rlhost/core"
)

func call(id, name, args string) core.ToolCall {
	return core.ToolCall{ID: id, Type: "function", Function: core.FunctionCall{Name: name, Arguments: args}}
}

func TestParseToolCalls(t *testing.T) {
	tests := []struct {
		name        string
		in          string
		content     string
		calls       []core.ToolCall
		nProblems   int
		problemLike string
	}{
		{name: "plain text", in: "Just an answer.\n", content: "Just an answer."},
		{
			name:    "one call as Qwen writes it",
			in:      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
			calls:   []core.ToolCall{call("call_0", "get_weather", `{"city": "Paris"}`)},
			content: "",
		},
		{
			name:    "content then two calls",
			in:      "Checking.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": [1, 2]}}\n</tool_call>",
			content: "Checking.",
			calls:   []core.ToolCall{call("call_0", "a", `{}`), call("call_1", "b", `{"x": [1, 2]}`)},
		},
		{
			name:    "arguments as a JSON string",
			in:      `<tool_call>{"name": "f", "arguments": "{\"k\": 1}"}</tool_call>`,
			calls:   []core.ToolCall{call("call_0", "f", `{"k": 1}`)},
			content: "",
		},
		{
			name:    "missing arguments",
			in:      `<tool_call>{"name": "f"}</tool_call>`,
			calls:   []core.ToolCall{call("call_0", "f", `{}`)},
			content: "",
		},
		{
			name:        "malformed JSON keeps the raw text and the name",
			in:          "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }\n</tool_call> after",
			content:     "after",
			calls:       []core.ToolCall{call("call_0", "f", `{"name": "f", "arguments": {"a": }`)},
			nProblems:   1,
			problemLike: "malformed JSON",
		},
		{
			name:        "no name",
			in:          `<tool_call>{"arguments": {}}</tool_call>`,
			calls:       []core.ToolCall{call("call_0", "", `{"arguments": {}}`)},
			nProblems:   1,
			problemLike: "missing \"name\"",
		},
		{
			name:        "truncated output",
			in:          "x <tool_call>\n{\"name\": \"f\", \"argu",
			content:     "x",
			calls:       []core.ToolCall{call("call_0", "f", `{"name": "f", "argu`)},
			nProblems:   2,
			problemLike: "no closing",
		},
		{
			name:        "trailing junk after the object",
			in:          `<tool_call>{"name": "f", "arguments": {}} extra</tool_call>`,
			calls:       []core.ToolCall{call("call_0", "f", `{"name": "f", "arguments": {}} extra`)},
			nProblems:   1,
			problemLike: "after the JSON",
		},
		{
			name:        "stray closing tag",
			in:          "done </tool_call>",
			content:     "done </tool_call>",
			nProblems:   1,
			problemLike: "stray",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			content, calls, problems := ParseToolCalls(tt.in)
			if content != tt.content {
				t.Errorf("content = %q, want %q", content, tt.content)
			}
			if !reflect.DeepEqual(calls, tt.calls) {
				t.Errorf("calls = %+v\nwant %+v", calls, tt.calls)
			}
			if len(problems) != tt.nProblems {
				t.Fatalf("problems = %v, want %d", problems, tt.nProblems)
			}
			if tt.problemLike != "" && !strings.Contains(fmt.Sprint(problems), tt.problemLike) {
				t.Errorf("problems = %v, want one mentioning %q", problems, tt.problemLike)
			}
		})
	}
}

// TestParseRenderRoundTrip: what Render writes for an assistant turn, parsed
// back, gives the same content and calls (arguments equal as JSON).
func TestParseRenderRoundTrip(t *testing.T) {
	for _, c := range loadCases(t) {
		for i, m := range c.Messages {
			if m.Role != core.RoleAssistant {
				continue
			}
			segs, err := render([]core.Message{m}, nil, false)
			if err != nil {
				t.Fatal(err)
			}
			var text string
			for _, s := range segs {
				if s.assistant {
					text = strings.TrimSuffix(s.text, imEnd)
				}
			}
			content, calls, problems := ParseToolCalls(text)
			if len(problems) > 0 || content != m.Content || len(calls) != len(m.ToolCalls) {
				t.Fatalf("%s message %d: parsed %q, %d calls, problems %v from %q", c.Name, i, content, len(calls), problems, text)
			}
			for k := range calls {
				if calls[k].Function.Name != m.ToolCalls[k].Function.Name || !sameJSON(t, calls[k].Function.Arguments, m.ToolCalls[k].Function.Arguments) {
					t.Errorf("%s message %d call %d: got %+v, want %+v", c.Name, i, k, calls[k], m.ToolCalls[k])
				}
			}
		}
	}
}

func sameJSON(t *testing.T, a, b string) bool {
	t.Helper()
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

func FuzzParseToolCalls(f *testing.F) {
	for _, s := range []string{
		"", "plain", "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
		"<tool_call><tool_call></tool_call></tool_call>", "</tool_call><tool_call>", "<tool_call>{\"name\":",
		"<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>", "<tool_call>null</tool_call>",
		"<tool_call>[1,2]</tool_call>", "<tool_call>{\"name\": 5}</tool_call>", "a<tool_call>\xff</tool_call>b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		content, calls, problems := ParseToolCalls(s)
		if want := strings.Count(s, toolCallOpen); len(calls) > want {
			t.Fatalf("%d calls from %d opening tags", len(calls), want)
		}
		for i, c := range calls {
			if c.ID != fmt.Sprintf("call_%d", i) || c.Type != "function" {
				t.Fatalf("call %d: id %q type %q", i, c.ID, c.Type)
			}
		}
		if len(content) > len(s) {
			t.Fatalf("content longer than input")
		}
		// Well-formed calls re-render and re-parse to the same thing.
		if len(problems) == 0 && len(calls) > 0 {
			m := core.Message{Role: core.RoleAssistant, Content: content, ToolCalls: calls}
			segs, err := render([]core.Message{m}, nil, false)
			if err != nil {
				return // e.g. arguments that are valid JSON but not re-encodable
			}
			var text string
			for _, sg := range segs {
				if sg.assistant {
					text = strings.TrimSuffix(sg.text, imEnd)
				}
			}
			c2, calls2, p2 := ParseToolCalls(text)
			if len(p2) > 0 || c2 != content || len(calls2) != len(calls) {
				t.Fatalf("re-parse of %q: %q %v %v", text, c2, calls2, p2)
			}
		}
	})
}
