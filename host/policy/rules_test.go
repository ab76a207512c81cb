package policy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlhost/rlhost/core"
)

func newTestRules(t *testing.T, src string) (Policy, error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.jsonl"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return New(Config{Name: "p", Provider: "rules", File: ptr("rules.jsonl")}, dir)
}

// The rules policy reacts to what the env said: a multi-turn episode whose
// replies depend on the tool results, with no script precomputed per task.
func TestRulesAdaptToTheEnv(t *testing.T) {
	p, err := newTestRules(t, `
{"task": "^calc/", "turn": 0, "reply": {"tool_calls": [{"function": {"name": "run", "arguments": "{\"cmd\": \"make test\"}"}}]}}
{"when": "FAILED: (\\w+) expected (\\d+)", "reply": {"tool_calls": [{"function": {"name": "fix", "arguments": "{\"test\": \"{{1}}\", \"want\": {{2}}}"}}]}}
{"when": "^ok", "reply": "all tests pass"}
{"task": "^chat/", "reply": "hello"}
`)
	if err != nil {
		t.Fatal(err)
	}
	ask := func(task string, turn int, last string, n int) (Response, error) {
		msgs := []core.Message{{Role: core.RoleUser, Content: "task"}}
		if last != "" {
			msgs = append(msgs, core.Message{Role: core.RoleTool, Content: last})
		}
		return p.Complete(context.Background(), Request{TaskID: task, Turn: turn, Messages: msgs, N: n})
	}
	r, err := ask("calc/1", 0, "", 1)
	if err != nil || len(r.Choices) != 1 || r.Choices[0].Message.ToolCalls[0].Function.Name != "run" || r.Choices[0].FinishReason != "tool_calls" {
		t.Fatalf("turn 0: %+v, %v", r, err)
	}
	r, err = ask("calc/1", 1, "FAILED: add expected 5", 1)
	if err != nil {
		t.Fatal(err)
	}
	tc := r.Choices[0].Message.ToolCalls[0]
	if tc.Function.Name != "fix" || tc.Function.Arguments != `{"test": "add", "want": 5}` || tc.ID == "" {
		t.Fatalf("turn 1 after a failure: %+v", tc)
	}
	r, err = ask("calc/1", 2, "ok: 3 passed", 3)
	if err != nil || len(r.Choices) != 3 || r.Choices[2].Message.Content != "all tests pass" {
		t.Fatalf("turn 2 after success, n=3: %+v, %v", r, err)
	}
	if r, err := ask("chat/9", 4, "anything", 1); err != nil || r.Choices[0].Message.Content != "hello" {
		t.Fatalf("catch-all for a task: %+v, %v", r, err)
	}
	_, err = ask("calc/1", 3, "segfault", 1)
	if !errors.Is(err, ErrExhausted) || !strings.Contains(err.Error(), `no rule matches task "calc/1" turn 3`) {
		t.Fatalf("nothing matches: %v", err)
	}
}

func TestRulesFileErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"", "no rules"},
		{`{"when": "("}`, "rules.jsonl:1: when: error parsing regexp"},
		{"{\"reply\": \"a\"}\n{\"task\": \"x\"}", `rules.jsonl:2: "reply" is missing`},
		{`{"reply": "a", "wehn": "x"}`, `unknown field "wehn"`},
		{`{"when": "(a)", "reply": "{{2}}"}`, "reply uses {{2}}, but when has 1 capture groups"},
		{`{"reply": {"role": "user", "content": "x"}}`, "replayed turns are assistant messages"},
	} {
		if _, err := newTestRules(t, tc.src); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.src, err, tc.want)
		}
	}
}

func FuzzParseRules(f *testing.F) {
	f.Add([]byte(`{"task": "^a", "when": "x(\\d)", "turn": 1, "reply": "{{1}}"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		rules, err := parseRules(data, "f")
		if err != nil {
			return
		}
		p := &rulesPolicy{file: "f", rules: rules}
		_, _ = p.Complete(context.Background(), Request{TaskID: "a", Messages: []core.Message{{Content: "x1"}}})
	})
}
