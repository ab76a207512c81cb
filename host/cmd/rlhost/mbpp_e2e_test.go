package main

// The flagship MBPP job through `rlhost run`: a multi-turn tool-using agent
// played by a fake OpenAI-compatible server (real Chat Completions wire
// format), the real mbpp env plugin and the real local sandbox backend.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/host/policy/fakeopenai"
)

// Each problem's text starts with the name of the script the fake agent
// plays for it, so one run covers every behaviour.
var mbppScripts = []string{"solve", "fix", "malformed", "unknown-tool", "timeout", "huge", "tamper", "context", "silent"}

func mbppDataset() string {
	var b strings.Builder
	for i, s := range mbppScripts {
		p := map[string]any{
			"task_id": 9000 + i, "text": fmt.Sprintf("[%s] Write a function add(a, b) that returns the sum of a and b.", s),
			"code": "def add(a, b):\n    return a + b\n", "test_list": []string{"assert add(1, 2) == 3", "assert add(-1, 1) == 0"},
			"test_setup_code": "", "challenge_test_list": []string{},
		}
		line, _ := json.Marshal(p)
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.String()
}

func writeFile(content string) fakeopenai.ReplyChoice {
	args, _ := json.Marshal(map[string]string{"path": "/workspace/solution.py", "content": content})
	return fakeopenai.ToolCall("write_file", string(args))
}

func bashCall(cmd string) fakeopenai.ReplyChoice {
	args, _ := json.Marshal(map[string]string{"command": cmd})
	return fakeopenai.ToolCall("bash", string(args))
}

const goodAdd = "def add(a, b):\n    return a + b\n"

// mbppAgent plays the script named in the first user message, turn by turn.
func mbppAgent(req fakeopenai.ChatRequest) fakeopenai.Reply {
	script := ""
	for _, m := range req.Messages {
		if m.Role == core.RoleUser {
			if i := strings.Index(m.Content, "["); i >= 0 {
				if j := strings.Index(m.Content[i:], "]"); j > 0 {
					script = m.Content[i+1 : i+j]
				}
			}
			break
		}
	}
	turn := req.Turn()
	one := func(c fakeopenai.ReplyChoice) fakeopenai.Reply {
		return fakeopenai.Reply{Choices: []fakeopenai.ReplyChoice{c}}
	}
	last := req.LastMessage()
	switch script {
	case "solve":
		return one([]fakeopenai.ReplyChoice{writeFile(goodAdd), fakeopenai.Text("done")}[min(turn, 1)])
	case "fix": // wrong first; after the failure feedback, read the file back and fix it
		steps := []fakeopenai.ReplyChoice{writeFile("def add(a, b):\n    return a - b\n"), fakeopenai.Text("done"),
			bashCall("cat /workspace/solution.py"), writeFile(goodAdd), fakeopenai.Text("fixed")}
		return one(steps[min(turn, len(steps)-1)])
	case "malformed":
		if turn == 0 {
			return one(fakeopenai.ToolCall("write_file", `{"path": "/workspace/solution.py", "content": `))
		}
		if turn == 1 && last.Role == core.RoleTool && strings.Contains(strings.ToLower(last.Content), "error") {
			return one(writeFile(goodAdd))
		}
		return one(fakeopenai.Text("done"))
	case "unknown-tool":
		if turn == 0 {
			return one(fakeopenai.ToolCall("launch_rockets", `{}`))
		}
		if turn == 1 {
			return one(writeFile(goodAdd))
		}
		return one(fakeopenai.Text("done"))
	case "timeout":
		steps := []fakeopenai.ReplyChoice{bashCall("sleep 30"), writeFile(goodAdd), fakeopenai.Text("done")}
		return one(steps[min(turn, len(steps)-1)])
	case "huge":
		steps := []fakeopenai.ReplyChoice{bashCall("head -c 5000000 /dev/zero | tr '\\0' x"), writeFile(goodAdd), fakeopenai.Text("done")}
		return one(steps[min(turn, len(steps)-1)])
	case "tamper": // a wrong answer that tries to fake a pass by exiting early
		steps := []fakeopenai.ReplyChoice{writeFile("import os\ndef add(a, b):\n    return 0\nos._exit(0)\n"), fakeopenai.Text("done")}
		return one(steps[min(turn, len(steps)-1)])
	case "context":
		if turn == 0 {
			return one(writeFile(goodAdd))
		}
		return fakeopenai.ContextLengthExceeded()
	case "silent": // never ends its turn with text: the host stops it at max_turns
		return one(bashCall("true"))
	}
	return fakeopenai.Error(400, "bad_request", "unknown script "+script)
}

func TestMBPPRunWithOpenAIPolicy(t *testing.T) {
	var storm atomic.Int32
	storm.Store(12) // the first 12 requests are rate-limited: a 429 storm
	srv := fakeopenai.New(func(req fakeopenai.ChatRequest) fakeopenai.Reply {
		if storm.Add(-1) >= 0 {
			return fakeopenai.RateLimited("0")
		}
		return mbppAgent(req)
	})
	defer srv.Close()
	srv.SetModels("scripted")
	dir := t.TempDir()
	write(t, dir, "problems.jsonl", mbppDataset())
	write(t, dir, "job.hcl", fmt.Sprintf(`
run {
  name = "mbpp-e2e"
  batch_size = %d
  group_size = 1
  concurrency = 9
  max_turns = 8
}
sandbox "local" {
  backend = "local"
  timeout = "30s"
}
env "mbpp" {
  dataset = "problems.jsonl"
  max_attempts = 2
  bash_timeout = "1s"
  tool_output_cap = 2048
}
policy "fake" {
  provider = "openai"
  base_url = %q
  model = "scripted"
  api_key_env = "RLHOST_TEST_KEY"
  backoff_base = "5ms"
  backoff_max = "20ms"
  max_retries = 20
}
output { dir = "out" }
`, len(mbppScripts), srv.URL))
	r := rlhostEnv(t, dir, []string{"RLHOST_TEST_KEY=sk-test"}, "run", "job.hcl")
	if r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	byScript := map[string]core.Trajectory{}
	for _, tr := range readTrajectories(t, filepath.Join(dir, "out", "trajectories.jsonl")) {
		for _, m := range tr.Messages {
			if m.Role == core.RoleUser {
				s := m.Content[strings.Index(m.Content, "[")+1 : strings.Index(m.Content, "]")]
				byScript[s] = tr
				break
			}
		}
	}
	if len(byScript) != len(mbppScripts) {
		t.Fatalf("got trajectories for %d scripts, want %d", len(byScript), len(mbppScripts))
	}
	expect := []struct {
		script string
		reward float64
		finish string
	}{
		{"solve", 1, core.FinishPassed}, {"fix", 1, core.FinishPassed}, {"malformed", 1, core.FinishPassed},
		{"unknown-tool", 1, core.FinishPassed}, {"timeout", 1, core.FinishPassed}, {"huge", 1, core.FinishPassed},
		{"tamper", 0, core.FinishAttemptsExceeded}, {"context", 0, core.FinishContextLimit}, {"silent", 0, core.FinishMaxTurns},
	}
	for _, e := range expect {
		tr := byScript[e.script]
		if tr.Reward != e.reward || tr.FinishReason != e.finish {
			t.Errorf("%s: reward %v finish %q, want %v %q (error %q)", e.script, tr.Reward, tr.FinishReason, e.reward, e.finish, tr.Error)
		}
	}
	// The fix relied on the file from its first attempt: the cat shows it.
	if !conversationHas(byScript["fix"], core.RoleTool, "return a - b") {
		t.Error("fix: the sandbox did not keep the first attempt's file across attempts")
	}
	if byScript["fix"].Metrics["attempts"] != 2 && byScript["fix"].Metrics["attempts_used"] != 2 {
		t.Errorf("fix: attempts metric = %v", byScript["fix"].Metrics)
	}
	if !conversationHas(byScript["timeout"], core.RoleTool, "timed out") {
		t.Error("timeout: the agent was not told its command timed out")
	}
	for _, m := range byScript["huge"].Messages {
		if m.Role == core.RoleTool && len(m.Content) > 4096 {
			t.Errorf("huge: a tool output of %d bytes reached the model (cap 2048)", len(m.Content))
		}
	}
	if !conversationHas(byScript["huge"], core.RoleTool, "truncated") {
		t.Error("huge: no truncation marker")
	}
	if !conversationHas(byScript["malformed"], core.RoleTool, "rror") || !conversationHas(byScript["unknown-tool"], core.RoleTool, "launch_rockets") {
		t.Error("malformed or unknown tool calls were not reported back to the model")
	}
	// Usage as reported by the server is recorded per turn.
	if tr := byScript["solve"]; len(tr.Turns) != 2 || tr.Turns[0].Usage.TotalTokens == 0 {
		t.Errorf("solve: turns %+v", tr.Turns)
	}
	if srv.Requests() < 12+len(mbppScripts) {
		t.Errorf("the 429 storm was not retried through: %d requests", srv.Requests())
	}
	waitNoProcesses(t, rlhostBin)
}

func conversationHas(tr core.Trajectory, role core.Role, substr string) bool {
	for _, m := range tr.Messages {
		if m.Role == role && strings.Contains(m.Content, substr) {
			return true
		}
	}
	return false
}

// examples/mbpp.hcl as its comment says to run it against a local server
// that wants no key: OPENAI_API_KEY is unset, and the run goes ahead.
func TestMBPPExampleAgainstKeylessServer(t *testing.T) {
	srv := fakeopenai.New(fakeopenai.Always(fakeopenai.Text("I cannot solve this.")))
	defer srv.Close()
	srv.SetModels("local-model")
	job, err := filepath.Abs("../../../examples/mbpp.hcl")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("OPENAI_API_KEY", "") // restored after the test
	os.Unsetenv("OPENAI_API_KEY")
	env := []string{"OPENAI_BASE_URL=" + srv.URL, "OPENAI_MODEL=local-model"}
	r := rlhostEnv(t, t.TempDir(), env, "run", job, "--var", "policy=openai", "--dry-run", "--steps", "1", "--out", "out")
	if r.code != 0 || strings.Contains(r.stderr, "is not set") {
		t.Fatalf("keyless server: %+v", r)
	}
	if srv.Requests() == 0 || srv.ModelsRequests() != 1 {
		t.Errorf("%d completions, %d model lists; want some and 1", srv.Requests(), srv.ModelsRequests())
	}
	for _, req := range srv.Log() {
		if req.APIKey() != "" {
			t.Fatalf("a key was sent although OPENAI_API_KEY is unset")
		}
	}
}
