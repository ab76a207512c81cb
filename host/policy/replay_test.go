package policy

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/rlhost/rlhost/core"
)

const replayFile = `{"task_id": "single", "completions": ["zero", "one", "two"]}

{"task_id": "multi", "episodes": [["e0t0", {"content": "e0t1", "tool_calls": [{"type": "function", "function": {"name": "run", "arguments": "{bad json"}}]}], ["e1t0"]]}` + "\r\n" +
	`{"task_id": "tools", "completions": [{"role": "assistant", "tool_calls": [{"id": "given", "type": "function", "function": {"name": "f", "arguments": "{}"}}], "finish_reason": "length"}]}
`

func newTestReplay(t *testing.T, content string) Policy {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "c.jsonl"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{Name: "r", Provider: "replay", File: ptr("c.jsonl")}, dir)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func text(s string) Choice {
	return Choice{Message: core.Message{Role: core.RoleAssistant, Content: s}, FinishReason: "stop"}
}

func TestReplayComplete(t *testing.T) {
	p := newTestReplay(t, replayFile)
	defer p.Close()
	e0t1 := Choice{FinishReason: "tool_calls", Message: core.Message{Role: core.RoleAssistant, Content: "e0t1",
		ToolCalls: []core.ToolCall{{ID: "call_0_1_0", Type: "function", Function: core.FunctionCall{Name: "run", Arguments: "{bad json"}}}}}
	tests := []struct {
		name    string
		req     Request
		want    []Choice
		wantErr error
	}{
		{"single index 0", Request{TaskID: "single"}, []Choice{text("zero")}, nil},
		{"single index 4 cycles", Request{TaskID: "single", Index: 4}, []Choice{text("one")}, nil},
		{"single whole group", Request{TaskID: "single", N: 4}, []Choice{text("zero"), text("one"), text("two"), text("zero")}, nil},
		{"single has no turn 1", Request{TaskID: "single", Turn: 1}, nil, ErrExhausted},
		{"multi turn 0", Request{TaskID: "multi"}, []Choice{text("e0t0")}, nil},
		{"multi turn 1 with tool call", Request{TaskID: "multi", Turn: 1}, []Choice{e0t1}, nil},
		{"multi episode 1", Request{TaskID: "multi", Index: 1}, []Choice{text("e1t0")}, nil},
		{"multi episode 2 cycles to 0", Request{TaskID: "multi", Index: 2, Turn: 1}, []Choice{e0t1}, nil},
		{"multi beyond script", Request{TaskID: "multi", Index: 1, Turn: 1}, nil, ErrExhausted},
		{"group partly beyond script", Request{TaskID: "multi", N: 2, Turn: 1}, nil, ErrExhausted},
		{"object turn keeps id and finish reason", Request{TaskID: "tools"}, []Choice{{FinishReason: "length", Message: core.Message{
			Role: core.RoleAssistant, ToolCalls: []core.ToolCall{{ID: "given", Type: "function", Function: core.FunctionCall{Name: "f", Arguments: "{}"}}}}}}, nil},
		{"unknown task", Request{TaskID: "nope"}, nil, ErrExhausted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := p.Complete(context.Background(), tc.req)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("error %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(resp.Choices, tc.want) {
				t.Fatalf("choices %#v\nwant %#v", resp.Choices, tc.want)
			}
		})
	}
	// A caller editing a returned message must not change the script.
	resp, _ := p.Complete(context.Background(), Request{TaskID: "multi", Turn: 1})
	resp.Choices[0].Message.ToolCalls[0].Function.Arguments = "changed"
	again, _ := p.Complete(context.Background(), Request{TaskID: "multi", Turn: 1})
	if again.Choices[0].Message.ToolCalls[0].Function.Arguments != "{bad json" {
		t.Fatal("replay script was modified through a returned message")
	}
}

func TestReplayMalformedFiles(t *testing.T) {
	good := `{"task_id":"a","completions":["x"]}` + "\n"
	tests := []struct {
		name    string
		content string
		wantErr string
	}{
		{"empty file", "\n\n", "c.jsonl: no tasks in replay file"},
		{"not JSON", good + "hello\n", "c.jsonl:2: invalid character"},
		{"missing task_id", `{"completions":["x"]}`, `c.jsonl:1: "task_id" is missing or empty`},
		{"empty task_id", `{"task_id":"","completions":["x"]}`, `c.jsonl:1: "task_id" is missing or empty`},
		{"no completions", `{"task_id":"a"}`, `c.jsonl:1: a line needs a non-empty "completions" or "episodes" list`},
		{"empty completions", `{"task_id":"a","completions":[]}`, `c.jsonl:1: a line needs a non-empty`},
		{"both modes", `{"task_id":"a","completions":["x"],"episodes":[["y"]]}`, `c.jsonl:1: a line has either`},
		{"empty episode", good + "\n" + `{"task_id":"b","episodes":[["y"],[]]}`, "c.jsonl:3: episodes[1] has no turns"},
		{"misspelt key", `{"task_id":"a","completion":["x"]}`, `c.jsonl:1: json: unknown field "completion"`},
		{"number turn", `{"task_id":"a","completions":[3]}`, "c.jsonl:1: completions[0]: a turn is a string or an assistant message object"},
		{"null turn", `{"task_id":"a","completions":[null]}`, "c.jsonl:1: completions[0]: a turn is a string"},
		{"user turn", `{"task_id":"a","episodes":[["x",{"role":"user","content":"hi"}]]}`, `c.jsonl:1: episodes[0][1]: role "user"`},
		{"tool call without name", `{"task_id":"a","completions":[{"tool_calls":[{"function":{"arguments":"{}"}}]}]}`, "completions[0]: tool_calls[0]: function name is empty"},
		{"arguments not a string", `{"task_id":"a","completions":[{"tool_calls":[{"function":{"name":"f","arguments":{}}}]}]}`, "c.jsonl:1: completions[0]: json: cannot unmarshal"},
		{"trailing data", `{"task_id":"a","completions":["x"]} {}`, "c.jsonl:1: trailing data"},
		{"duplicate task", good + good, `c.jsonl:2: task_id "a" already defined on line 1`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "c.jsonl")
			if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := New(Config{Name: "r", Provider: "replay", File: ptr(path)}, "/elsewhere")
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

// encodeReplayLine writes an entry back in the file format, for the fuzz
// round trip.
func encodeReplayLine(e replayEntry) ([]byte, error) {
	turn := func(c Choice) any {
		return map[string]any{"content": c.Message.Content, "tool_calls": c.Message.ToolCalls, "finish_reason": c.FinishReason}
	}
	line := map[string]any{"task_id": e.taskID}
	if e.single != nil {
		var cs []any
		for _, c := range e.single {
			cs = append(cs, turn(c))
		}
		line["completions"] = cs
	} else {
		var eps [][]any
		for _, ep := range e.episodes {
			var ts []any
			for _, c := range ep {
				ts = append(ts, turn(c))
			}
			eps = append(eps, ts)
		}
		line["episodes"] = eps
	}
	return json.Marshal(line)
}

func FuzzParseReplayLine(f *testing.F) {
	for _, seed := range strings.Split(replayFile, "\n") {
		f.Add([]byte(seed))
	}
	f.Add([]byte(`{"task_id":"a","completions":[{"content":null}]}`))
	f.Add([]byte(`{"task_id":"a","episodes":[[{"tool_calls":[{"id":"","function":{"name":"f","arguments":"\u0000"}}]}]]}`))
	f.Add([]byte(`{"task_id":"a","completions":["x"],"episodes":[]}`))
	f.Add([]byte(`[1,2]`))
	f.Fuzz(func(t *testing.T, line []byte) {
		e, err := parseReplayLine(line)
		if err != nil {
			return
		}
		if e.taskID == "" || (len(e.single) == 0) == (len(e.episodes) == 0) {
			t.Fatalf("accepted an invalid entry: %+v", e)
		}
		all := e.single
		for _, ep := range e.episodes {
			if len(ep) == 0 {
				t.Fatalf("accepted an empty episode: %+v", e)
			}
			all = append(all, ep...)
		}
		for _, c := range all {
			if c.Message.Role != core.RoleAssistant || c.FinishReason == "" {
				t.Fatalf("bad turn %+v", c)
			}
			for _, tc := range c.Message.ToolCalls {
				if tc.ID == "" || tc.Type == "" || tc.Function.Name == "" {
					t.Fatalf("bad tool call %+v", tc)
				}
			}
		}
		// What was accepted survives being written back and parsed again.
		again, err := encodeReplayLine(e)
		if err != nil {
			t.Fatal(err)
		}
		e2, err := parseReplayLine(again)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", again, err)
		}
		if !reflect.DeepEqual(e, e2) {
			t.Fatalf("round trip changed the entry:\n%+v\n%+v", e, e2)
		}
	})
}
