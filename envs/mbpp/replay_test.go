package mbpp_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"testing"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/envs/mbpp"
)

// examples/mbpp/replay.jsonl scripts four episodes per sample task for the
// host's "replay" policy, so `rlhost run` can drive this env end to end with
// no model. It is generated from sample.jsonl by replayScripts; this test
// keeps the file in sync (MBPP_UPDATE_REPLAY=1 rewrites it) and plays the
// scripts through the env to pin the outcome each one is meant to have.
const replayFile = sampleDir + "/replay.jsonl"

// The scripted episodes, in file order, with their outcome under the
// default config (max_attempts 3) and attempt_discount 0.5.
var replayOutcomes = []struct {
	name   string
	reward float64
	finish string
}{
	{"solves at once", 1, core.FinishPassed},
	{"fixes after feedback", 0.5, core.FinishPassed},
	{"never solves", 0, core.FinishAttemptsExceeded},
	{"recovers from bad tool calls", 1, core.FinishPassed},
}

type replayTurn struct {
	Content   string          `json:"content"`
	ToolCalls []core.ToolCall `json:"tool_calls,omitempty"`
}

type replayLine struct {
	TaskID   string         `json:"task_id"`
	Episodes [][]replayTurn `json:"episodes"`
}

var defName = regexp.MustCompile(`(?m)^def (\w+)\(([^)]*)\)`)

// stub defines the reference's functions with bodies that raise, so the
// tests fail with a traceback.
func stub(code string) string {
	var b bytes.Buffer
	for _, m := range defName.FindAllStringSubmatch(code, -1) {
		fmt.Fprintf(&b, "def %s(%s):\n    raise NotImplementedError(%q)\n\n", m[1], m[2], m[1])
	}
	return b.String()
}

func writeCall(id, path, content string) core.ToolCall {
	args, _ := json.Marshal(map[string]string{"path": path, "content": content})
	return core.ToolCall{ID: id, Type: "function", Function: core.FunctionCall{Name: "write_file", Arguments: string(args)}}
}

func replayScripts(p mbpp.Problem) [][]replayTurn {
	const sol = "/workspace/solution.py"
	done := func(s string) replayTurn { return replayTurn{Content: s} }
	return [][]replayTurn{
		{{Content: "I'll write the solution.", ToolCalls: []core.ToolCall{writeCall("w1", sol, p.Code)}}, done("Done.")},
		{{ToolCalls: []core.ToolCall{writeCall("w1", sol, stub(p.Code))}}, done("Submitting a first draft."),
			{Content: "The tests show what is missing.", ToolCalls: []core.ToolCall{writeCall("w2", sol, p.Code)}}, done("Fixed.")},
		{{ToolCalls: []core.ToolCall{writeCall("w1", sol, stub(p.Code))}}, done("Done."), done("Still done."), done("Done again.")},
		{{ToolCalls: []core.ToolCall{
			{ID: "bad1", Type: "function", Function: core.FunctionCall{Name: "write_file", Arguments: `{"path": "solution.py", "content": "def`}},
			{ID: "bad2", Type: "function", Function: core.FunctionCall{Name: "run_python", Arguments: `{"code": "print(1)"}`}},
		}},
			{ToolCalls: []core.ToolCall{{ID: "ls", Type: "function", Function: core.FunctionCall{Name: "bash", Arguments: `{"command": "ls -la"}`}}}},
			{ToolCalls: []core.ToolCall{writeCall("w1", sol, p.Code)}}, done("Done.")},
	}
}

func generateReplay(t *testing.T) []byte {
	t.Helper()
	ps, err := mbpp.LoadDataset(mbpp.DatasetOptions{Path: sampleDir + "/sample.jsonl"})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, p := range ps {
		line, err := json.Marshal(replayLine{TaskID: fmt.Sprint(p.TaskID), Episodes: replayScripts(p)})
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func TestReplayFileInSync(t *testing.T) {
	want := generateReplay(t)
	if os.Getenv("MBPP_UPDATE_REPLAY") == "1" {
		if err := os.WriteFile(replayFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(replayFile)
	if err != nil {
		t.Fatalf("%v (MBPP_UPDATE_REPLAY=1 go test ./envs/mbpp -run TestReplayFileInSync writes it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is out of date: MBPP_UPDATE_REPLAY=1 go test ./envs/mbpp -run TestReplayFileInSync", replayFile)
	}
}

func TestReplayScriptsOutcomes(t *testing.T) {
	data, err := os.ReadFile(replayFile)
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t, map[string]any{"attempt_discount": 0.5}, core.SandboxSpec{})
	for i, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		if i%6 != 0 { // every sixth task keeps the suite fast; all share the generator
			continue
		}
		var rl replayLine
		if err := json.Unmarshal(line, &rl); err != nil {
			t.Fatal(err)
		}
		if len(rl.Episodes) != len(replayOutcomes) {
			t.Fatalf("task %s: %d episodes", rl.TaskID, len(rl.Episodes))
		}
		for k, ep := range rl.Episodes {
			msgs := make([]core.Message, len(ep))
			for j, turn := range ep {
				msgs[j] = core.Message{Role: core.RoleAssistant, Content: turn.Content, ToolCalls: turn.ToolCalls}
			}
			_, obs := r.run(t, rl.TaskID, len(msgs), msgs...)
			want := replayOutcomes[k]
			if obs.Reward != want.reward || obs.FinishReason != want.finish {
				t.Errorf("task %s, %s: reward %v (%s), want %v (%s)", rl.TaskID, want.name, obs.Reward, obs.FinishReason, want.reward, want.finish)
			}
		}
	}
}
