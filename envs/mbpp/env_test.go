package mbpp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/core/sdk/envplugin"
	"github.com/rlhost/rlhost/core/sdk/envplugin/envtest"
	"github.com/rlhost/rlhost/envs/mbpp"
	"github.com/rlhost/rlhost/plugins/local"
)

func TestMain(m *testing.M) {
	// The test binary doubles as the local backend's sandbox init.
	if local.Reexec() {
		return
	}
	os.Exit(m.Run())
}

const sampleDir = "../../examples/mbpp"

// rig is one env served over real gRPC plus a lent sandbox of the real
// local backend.
type rig struct {
	env envplugin.Environment
	sb  *envtest.BackendSandbox
	n   atomic.Int64
}

func newRig(t testing.TB, envCfg map[string]any, spec core.SandboxSpec) *rig {
	t.Helper()
	return newRigIsolated(t, "none", envCfg, spec)
}

func newRigIsolated(t testing.TB, isolation string, envCfg map[string]any, spec core.SandboxSpec) *rig {
	t.Helper()
	b := local.New()
	bcfg, _ := json.Marshal(map[string]any{"isolation": isolation, "state_dir": t.TempDir()})
	if ds := b.Configure(context.Background(), schema.Config{Name: "local", JSON: bcfg}, spec); ds.HasErrors() {
		skipWithoutUserNamespaces(t, ds.Err())
		t.Fatalf("configure local backend: %v", ds.Err())
	}
	t.Cleanup(func() {
		if err := b.Shutdown(context.Background()); err != nil {
			t.Errorf("shutdown local backend: %v", err)
		}
	})
	if isolation == "namespaces" {
		// Create once by hand, to tell a kernel without user namespaces
		// from a failure.
		info, err := b.Create(context.Background(), spec)
		if err != nil {
			skipWithoutUserNamespaces(t, err)
			t.Fatalf("create namespaced sandbox: %v", err)
		}
		if err := b.Destroy(context.Background(), info.ID); err != nil {
			t.Fatal(err)
		}
	}
	sb := envtest.NewSandbox(t, b, spec, 60*time.Second)
	client := envtest.Serve(t, mbpp.New())
	cfg := map[string]any{"dataset": "sample.jsonl"}
	for k, v := range envCfg {
		cfg[k] = v
	}
	js, _ := json.Marshal(cfg)
	if ds := client.Configure(context.Background(), schema.Config{Name: "mbpp", JSON: js, BaseDir: sampleDir}); ds.HasErrors() {
		t.Fatalf("configure mbpp: %v", ds.Err())
	}
	return &rig{env: client, sb: sb}
}

// skipWithoutUserNamespaces skips, loudly, where the kernel has user
// namespaces switched off (the local backend names that in its errors).
func skipWithoutUserNamespaces(t testing.TB, err error) {
	t.Helper()
	if msg := err.Error(); strings.Contains(msg, "user namespaces are disabled") || strings.Contains(msg, "user namespaces look unavailable") {
		t.Skipf("SKIP: this kernel cannot run namespaced sandboxes, so the namespaced mbpp tests cannot run here: %v", err)
	}
}

// run plays one episode on task with a scripted policy: turn i sends
// replies[i], and an empty reply (end of turn) after the script runs out.
func (r *rig) run(t testing.TB, task string, maxTurns int, replies ...core.Message) ([]core.Message, envplugin.Observation) {
	t.Helper()
	ep := envplugin.Episode{ID: fmt.Sprintf("ep-%d", r.n.Add(1)), Task: core.Task{ID: task}, Sandbox: r.sb}
	return envtest.Episode(t, r.env, ep, maxTurns, func(turn int, _ []core.Message) core.Message {
		if turn < len(replies) {
			return replies[turn]
		}
		return endTurn()
	})
}

func call(id, name string, args any) core.ToolCall {
	raw, ok := args.(string)
	if !ok {
		b, _ := json.Marshal(args)
		raw = string(b)
	}
	return core.ToolCall{ID: id, Type: "function", Function: core.FunctionCall{Name: name, Arguments: raw}}
}

func tools(calls ...core.ToolCall) core.Message {
	return core.Message{Role: core.RoleAssistant, ToolCalls: calls}
}

func endTurn() core.Message {
	return core.Message{Role: core.RoleAssistant, Content: "Done."}
}

func write(id, path, content string) core.ToolCall {
	return call(id, "write_file", map[string]string{"path": path, "content": content})
}

func bash(id, command string) core.ToolCall {
	return call(id, "bash", map[string]string{"command": command})
}

// problem returns a sample problem by task id.
func problem(t testing.TB, id int) mbpp.Problem {
	t.Helper()
	ps, err := mbpp.LoadDataset(mbpp.DatasetOptions{Path: sampleDir + "/sample.jsonl"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.TaskID == id {
			return p
		}
	}
	t.Fatalf("no sample task %d", id)
	return mbpp.Problem{}
}

func wantFinal(t *testing.T, obs envplugin.Observation, reward float64, reason string, metrics map[string]float64) {
	t.Helper()
	if !obs.Done || obs.Reward != reward || obs.FinishReason != reason {
		t.Fatalf("final: done=%v reward=%v reason=%q, want reward=%v reason=%q (metrics %v)", obs.Done, obs.Reward, obs.FinishReason, reward, reason, obs.Metrics)
	}
	for k, v := range metrics {
		if obs.Metrics[k] != v {
			t.Errorf("metric %s = %v, want %v (all: %v)", k, obs.Metrics[k], v, obs.Metrics)
		}
	}
}

func toolMessages(conv []core.Message) map[string]core.Message {
	out := map[string]core.Message{}
	for _, m := range conv {
		if m.Role == core.RoleTool {
			out[m.ToolCallID] = m
		}
	}
	return out
}

func TestSolvedFirstAttempt(t *testing.T) {
	r := newRig(t, nil, core.SandboxSpec{})
	p := problem(t, 1001)
	conv, obs := r.run(t, "1001", 5, tools(write("w1", "/workspace/solution.py", p.Code)))
	wantFinal(t, obs, 1, core.FinishPassed, map[string]float64{
		"attempts": 1, "turns": 2, "tool_calls": 1, "tool_errors": 0, "tests_passed": 3, "tests_total": 3, "passed": 1,
	})
	if conv[0].Role != core.RoleSystem || !strings.Contains(conv[0].Content, "/workspace/solution.py") {
		t.Errorf("system prompt does not name the solution file: %q", conv[0].Content)
	}
	if conv[1].Role != core.RoleUser || !strings.HasPrefix(conv[1].Content, p.Text) || !strings.Contains(conv[1].Content, p.TestList[2]) {
		t.Errorf("first user message lacks the task text or tests: %q", conv[1].Content)
	}
	if m := toolMessages(conv)["w1"]; !strings.Contains(m.Content, "Wrote") || m.Role != core.RoleTool {
		t.Errorf("write_file result: %+v", m)
	}
}

func TestFirstObservationOffersConfiguredTools(t *testing.T) {
	r := newRig(t, map[string]any{"tools": []string{"bash", "write_file"}}, core.SandboxSpec{})
	sess, obs, err := r.env.NewEpisode(context.Background(), envplugin.Episode{ID: "tools", Task: core.Task{ID: "1002"}, Sandbox: r.sb})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.End(context.Background(), core.FinishCancelled)
	var names []string
	for _, ts := range obs.Tools {
		names = append(names, ts.Function.Name)
		var schema map[string]any
		if ts.Type != "function" || json.Unmarshal(ts.Function.Parameters, &schema) != nil || schema["type"] != "object" {
			t.Errorf("tool %s: bad spec %+v", ts.Function.Name, ts)
		}
	}
	if strings.Join(names, ",") != "bash,write_file" {
		t.Fatalf("tools offered: %v", names)
	}
	// A tool that exists but is not configured is unknown to this episode.
	o, err := sess.Step(context.Background(), tools(call("r", "read_file", `{"path":"x"}`)))
	if err != nil || len(o.Messages) != 1 || !strings.Contains(o.Messages[0].Content, "unknown tool \"read_file\"") {
		t.Fatalf("read_file while disabled: %v %+v", err, o.Messages)
	}
}

func TestSolvedAfterFeedbackUsingEarlierFile(t *testing.T) {
	r := newRig(t, map[string]any{"attempt_discount": 0.5}, core.SandboxSpec{})
	conv, obs := r.run(t, "1014", 8,
		// Attempt 1: the solution imports a helper with an off-by-one bug.
		tools(
			write("h1", "helper.py", "def step(a, b):\n    return b, a + b + 1\n"),
			write("s1", "/workspace/solution.py", "from helper import step\n\ndef lucas(n):\n    a, b = 2, 1\n    for _ in range(n):\n        a, b = step(a, b)\n    return a\n"),
		),
		endTurn(),
		// Attempt 2: only the helper is fixed; solution.py from attempt 1 is reused.
		tools(bash("b1", "sed -i 's/ + 1$//' helper.py && cat solution.py | head -1")),
	)
	wantFinal(t, obs, 0.5, core.FinishPassed, map[string]float64{"attempts": 2, "tool_calls": 3, "turns": 4, "tests_passed": 3})
	var feedback string
	for _, m := range conv[2:] {
		if m.Role == core.RoleUser {
			feedback = m.Content
		}
	}
	for _, want := range []string{"attempt 1 of 3", "assert lucas(10) == 123", "where lucas(10) =", "/workspace/solution.py"} {
		if !strings.Contains(feedback, want) {
			t.Errorf("feedback lacks %q:\n%s", want, feedback)
		}
	}
	if m := toolMessages(conv)["b1"]; !strings.Contains(m.Content, "from helper import step") || !strings.Contains(m.Content, "exit_code: 0") {
		t.Errorf("bash in attempt 2 did not see attempt 1's file: %q", m.Content)
	}
}

func TestAttemptsExhausted(t *testing.T) {
	r := newRig(t, map[string]any{"max_attempts": 2}, core.SandboxSpec{})
	conv, obs := r.run(t, "1010", 10,
		tools(write("s1", "solution.py", "def reverse_digits(n):\n    return n\n")),
		endTurn(),
		tools(write("s2", "solution.py", "def reverse_digits(n):\n    return -n\n")),
		endTurn(),
	)
	wantFinal(t, obs, 0, core.FinishAttemptsExceeded, map[string]float64{"attempts": 2, "turns": 4, "passed": 0, "tests_total": 3})
	users := 0
	for _, m := range conv {
		if m.Role == core.RoleUser {
			users++
		}
	}
	if users != 2 { // the task, and feedback after attempt 1 only
		t.Fatalf("%d user messages, want 2", users)
	}
}

func TestNoSolutionWrittenFails(t *testing.T) {
	r := newRig(t, map[string]any{"max_attempts": 1}, core.SandboxSpec{})
	_, obs := r.run(t, "1003", 3)
	wantFinal(t, obs, 0, core.FinishAttemptsExceeded, map[string]float64{"attempts": 1, "tests_passed": 0, "tests_total": 3})
}

func TestChallengeTests(t *testing.T) {
	// The reference of 1002 passes test_list and challenge_test_list; a
	// solution that crashes on [] passes only the visible tests.
	sol := "def second_largest(xs):\n    v = sorted(set(xs), reverse=True)\n    return v[1] if len(v) > 1 else (None if xs else xs[0])\n"
	r := newRig(t, map[string]any{"max_attempts": 1, "include_challenge_tests": true}, core.SandboxSpec{})
	conv, obs := r.run(t, "1002", 3, tools(write("s", "solution.py", sol)))
	wantFinal(t, obs, 0, core.FinishAttemptsExceeded, map[string]float64{"tests_passed": 3, "tests_total": 4})
	if strings.Contains(conv[1].Content, "second_largest([])") {
		t.Errorf("challenge test shown in the prompt")
	}
	r2 := newRig(t, map[string]any{"max_attempts": 1}, core.SandboxSpec{})
	_, obs = r2.run(t, "1002", 3, tools(write("s", "solution.py", sol)))
	wantFinal(t, obs, 1, core.FinishPassed, map[string]float64{"tests_total": 3})
}

func TestToolCallErrors(t *testing.T) {
	r := newRig(t, map[string]any{"bash_timeout": "1s", "tool_output_cap": 2000}, core.SandboxSpec{})
	calls := []struct {
		call core.ToolCall
		want []string
	}{
		{call("malformed", "write_file", `{"path": "a.py", "content": "x`), []string{"Error:", "not valid JSON", "write_file expects"}},
		{call("notobject", "bash", `["ls"]`), []string{"Error:", "must be a JSON object"}},
		{call("missing", "write_file", `{"path": "a.py"}`), []string{"Error:", `missing argument "content"`}},
		{call("extra", "bash", `{"command": "ls", "cwd": "/"}`), []string{"Error:", `unexpected argument "cwd"`}},
		{call("wrongtype", "bash", `{"command": 42}`), []string{"Error:", `"command" must be a string`}},
		{call("unknown", "python", `{"code": "1"}`), []string{`Error: unknown tool "python"`, "bash, read_file, write_file"}},
		{call("nofile", "read_file", `{"path": "nope.txt"}`), []string{"Error: no such file", "nope.txt"}},
		{call("outside", "read_file", `{"path": "/etc/passwd"}`), []string{"Error:", "outside the workspace"}},
		{call("climb", "write_file", `{"path": "../escape.py", "content": "x"}`), []string{"Error:", "outside the workspace"}},
		{call("timeout", "bash", `{"command": "echo started; sleep 30"}`), []string{"Error: command timed out after 1s"}},
		{call("huge", "bash", `{"command": "head -c 200000 /dev/zero | tr '\\0' a; echo; echo THE-END >&2"}`), []string{"[... output truncated", "THE-END"}},
		{call("exit", "bash", `{"command": "echo out; echo err >&2; exit 3"}`), []string{"exit_code: 3", "out", "err"}},
		{bash("roundtrip1", "mkdir -p notes && printf 'hi\\n' > notes/a.txt"), []string{"exit_code: 0"}},
		{call("roundtrip2", "read_file", `{"path": "/workspace/notes/a.txt"}`), []string{"hi"}},
	}
	var msg core.Message
	msg.Role = core.RoleAssistant
	for _, c := range calls {
		msg.ToolCalls = append(msg.ToolCalls, c.call)
	}
	conv, obs := r.run(t, "1001", 1, msg)
	// The host stopped the episode after one turn: End(max_turns).
	wantFinal(t, obs, 0, core.FinishMaxTurns, map[string]float64{"tool_calls": float64(len(calls)), "tool_errors": 10, "attempts": 0})
	got := toolMessages(conv)
	if len(got) != len(calls) {
		t.Fatalf("%d tool messages for %d calls", len(got), len(calls))
	}
	for _, c := range calls {
		m := got[c.call.ID]
		for _, w := range c.want {
			if !strings.Contains(m.Content, w) {
				t.Errorf("%s: result lacks %q:\n%s", c.call.ID, w, m.Content)
			}
		}
	}
	if n := len(got["huge"].Content); n > 2000 {
		t.Errorf("huge output is %d bytes, cap 2000", n)
	}
}

func TestEndByHostForMaxTurns(t *testing.T) {
	// A correct solution that was never submitted earns nothing when the
	// host stops the episode.
	r := newRig(t, nil, core.SandboxSpec{})
	p := problem(t, 1005)
	_, obs := r.run(t, "1005", 2,
		tools(write("s", "solution.py", p.Code)),
		tools(bash("b", "python3 -c 'import solution; print(solution.circle_area(1))'")),
	)
	wantFinal(t, obs, 0, core.FinishMaxTurns, map[string]float64{"turns": 2, "tool_calls": 2, "attempts": 0, "passed": 0})
}

func TestStepAfterDoneFails(t *testing.T) {
	r := newRig(t, map[string]any{"max_attempts": 1}, core.SandboxSpec{})
	sess, _, err := r.env.NewEpisode(context.Background(), envplugin.Episode{ID: "x", Task: core.Task{ID: "1001"}, Sandbox: r.sb})
	if err != nil {
		t.Fatal(err)
	}
	obs, err := sess.Step(context.Background(), endTurn())
	if err != nil || !obs.Done {
		t.Fatalf("first step: %v %+v", err, obs)
	}
	if _, err := sess.Step(context.Background(), endTurn()); err == nil {
		t.Fatal("step after done succeeded")
	}
	// Even if the host also reports a stop, the episode keeps its own end.
	end, err := sess.End(context.Background(), core.FinishTimeout)
	if err != nil || end.FinishReason != core.FinishAttemptsExceeded {
		t.Fatalf("end: %v %+v", err, end)
	}
}

func TestEndAfterPassKeepsReward(t *testing.T) {
	r := newRig(t, nil, core.SandboxSpec{})
	p := problem(t, 1020)
	sess, _, err := r.env.NewEpisode(context.Background(), envplugin.Episode{ID: "keep", Task: core.Task{ID: "1020"}, Sandbox: r.sb})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sess.Step(context.Background(), tools(write("s", "solution.py", p.Code))); err != nil {
		t.Fatal(err)
	}
	if obs, err := sess.Step(context.Background(), endTurn()); err != nil || obs.Reward != 1 {
		t.Fatalf("grade: %v %+v", err, obs)
	}
	end, err := sess.End(context.Background(), core.FinishContextLimit)
	if err != nil {
		t.Fatal(err)
	}
	wantFinal(t, end, 1, core.FinishPassed, map[string]float64{"passed": 1})
}

func TestEndAfterFailedAttemptCountsIt(t *testing.T) {
	r := newRig(t, nil, core.SandboxSpec{})
	_, obs := r.run(t, "1013", 3,
		tools(write("s", "solution.py", "def popcount(n):\n    return n\n")),
		endTurn(),
		tools(bash("b", "cat solution.py")),
	)
	wantFinal(t, obs, 0, core.FinishMaxTurns, map[string]float64{"attempts": 1, "turns": 3, "tool_calls": 2, "tests_passed": 1, "tests_total": 3})
}

func TestEndForContextLimit(t *testing.T) {
	r := newRig(t, nil, core.SandboxSpec{})
	sess, _, err := r.env.NewEpisode(context.Background(), envplugin.Episode{ID: "ctx", Task: core.Task{ID: "1020"}, Sandbox: r.sb})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sess.Step(context.Background(), tools(bash("b", "echo hi"))); err != nil {
		t.Fatal(err)
	}
	end, err := sess.End(context.Background(), core.FinishContextLimit)
	if err != nil {
		t.Fatal(err)
	}
	wantFinal(t, end, 0, core.FinishContextLimit, map[string]float64{"turns": 1, "tool_calls": 1, "attempts": 0})
}

// TestTampering plays agents that try to pass without a correct solution.
// Each leaves a wrong solution.py and must get reward 0.
func TestTampering(t *testing.T) {
	const wrong = "def count_vowels(s):\n    return -1\n"
	cases := []struct {
		name    string
		spec    core.SandboxSpec
		replies []core.Message
		check   func(t *testing.T, conv []core.Message)
	}{
		{name: "edits test files", replies: []core.Message{tools(
			write("s", "solution.py", wrong),
			write("t1", "test_solution.py", "def test_all():\n    pass\n"),
			write("t2", "tests/test_cases.py", "assert True\n"),
			bash("t3", "printf 'all tests passed\\n' > results.txt; mkdir -p .hidden && cp solution.py .hidden/"),
		)}},
		{name: "exit(0) at import", replies: []core.Message{tools(write("s", "solution.py", "import sys\nsys.exit(0)\n"+wrong))}},
		{name: "os._exit(0) in the function", replies: []core.Message{tools(write("s", "solution.py", "import os\ndef count_vowels(s):\n    os._exit(0)\n"))}},
		{name: "monkeypatched assert", replies: []core.Message{tools(write("s", "solution.py",
			"import builtins, sys\nbuiltins.AssertionError = type('Never', (BaseException,), {})\nsys.excepthook = lambda *a: None\n"+
				"class Yes(int):\n    def __eq__(self, o):\n        return True\n    __hash__ = int.__hash__\n"+
				"def count_vowels(s):\n    return Yes(-1)\n"))}},
		{name: "sitecustomize, pth and usercustomize", replies: []core.Message{tools(
			write("s", "solution.py", wrong),
			write("c1", "sitecustomize.py", "import os\nos._exit(0)\n"),
			write("c2", "usercustomize.py", "import os\nos._exit(0)\n"),
			write("c3", "zz.pth", "import os; os._exit(0)\n"),
			bash("c4", "mkdir -p lib && cp sitecustomize.py lib/ && echo 'export PYTHONPATH=$PWD/lib PYTHONSTARTUP=$PWD/sitecustomize.py' >> .bashrc"),
		)}},
		{name: "fake python3 earlier in PATH",
			// The operator's sandbox PATH starts with the workspace's bin/,
			// so the agent can shadow python3 for anyone who trusts PATH.
			spec: core.SandboxSpec{Env: map[string]string{"PATH": "bin:/usr/local/bin:/usr/bin:/bin"}},
			replies: []core.Message{tools(
				write("s", "solution.py", wrong),
				write("p", "bin/python3", "#!/bin/sh\necho 'all tests passed'\nexit 0\n"),
				bash("chmod", "chmod +x bin/python3 && python3 -c 'print(1)'"),
			)},
			check: func(t *testing.T, conv []core.Message) {
				if m := toolMessages(conv)["chmod"]; !strings.Contains(m.Content, "all tests passed") {
					t.Fatalf("the fake python3 was not in effect for PATH users: %q", m.Content)
				}
			}},
		{name: "background process rewriting files", replies: []core.Message{tools(
			write("s", "solution.py", wrong),
			bash("bg", "(for i in $(seq 100); do printf 'import os\\nos._exit(0)\\n' > sitecustomize.py; "+
				"printf 'def test(): pass\\n' > test_solution.py; sleep 0.05; done) >/dev/null 2>&1 & echo started"),
		)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, map[string]any{"max_attempts": 1}, tc.spec)
			conv, obs := r.run(t, "1001", 4, tc.replies...)
			wantFinal(t, obs, 0, core.FinishAttemptsExceeded, map[string]float64{"tests_passed": 0, "passed": 0})
			if tc.check != nil {
				tc.check(t, conv)
			}
		})
	}
}

// TestTamperingDoesNotBreakHonestSolutions: the same plants next to a
// correct solution still pass, so rewards are not lost to the defences.
func TestTamperingDoesNotBreakHonestSolutions(t *testing.T) {
	p := problem(t, 1001)
	r := newRig(t, nil, core.SandboxSpec{Env: map[string]string{"PATH": "bin:/usr/local/bin:/usr/bin:/bin"}})
	_, obs := r.run(t, "1001", 4, tools(
		write("s", "solution.py", p.Code),
		write("c1", "sitecustomize.py", "import os\nos._exit(0)\n"),
		write("c2", "json.py", "raise SystemExit(0)\n"),
		write("p", "bin/python3", "#!/bin/sh\nexit 1\n"),
		bash("chmod", "chmod +x bin/python3"),
	))
	wantFinal(t, obs, 1, core.FinishPassed, map[string]float64{"tests_passed": 3})
}

// TestSampleReferencesPassInSandbox checks that every sample problem's
// reference code passes its tests, challenge tests included.
func TestSampleReferencesPassInSandbox(t *testing.T) {
	r := newRig(t, map[string]any{"max_attempts": 1, "include_challenge_tests": true}, core.SandboxSpec{})
	ps, err := mbpp.LoadDataset(mbpp.DatasetOptions{Path: sampleDir + "/sample.jsonl"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) < 20 {
		t.Fatalf("sample has %d problems, want at least 20", len(ps))
	}
	for _, p := range ps {
		_, obs := r.run(t, fmt.Sprint(p.TaskID), 3, tools(write("s", "solution.py", p.Code)))
		if obs.Reward != 1 {
			t.Errorf("task %d: reference code got reward %v (%s, %v)", p.TaskID, obs.Reward, obs.FinishReason, obs.Metrics)
		}
	}
}

// TestUnderNamespaces runs a solved episode and a tampering one with the
// local backend's namespace isolation, where /workspace is the real path.
func TestUnderNamespaces(t *testing.T) {
	p := problem(t, 1006)
	r := newRigIsolated(t, "namespaces", nil, core.SandboxSpec{Env: map[string]string{"PATH": "/workspace/bin:/usr/local/bin:/usr/bin:/bin"}})
	conv, obs := r.run(t, "1006", 5,
		tools(write("s", "/workspace/solution.py", "def run_lengths(s):\n    return []\n"),
			write("p", "/workspace/bin/python3", "#!/bin/sh\necho 'all tests passed'\n"),
			bash("b", "chmod +x /workspace/bin/python3 && python3 -c 1 && cat /workspace/solution.py | wc -l"),
			bash("sys", "cp /workspace/bin/python3 /usr/local/bin/python3 || cp /workspace/bin/python3 /usr/bin/python3; echo sitecustomize > /usr/lib/python3/dist-packages/sitecustomize.py")),
		endTurn(),
		tools(write("s2", "/workspace/solution.py", p.Code)),
	)
	wantFinal(t, obs, 1, core.FinishPassed, map[string]float64{"attempts": 2, "tests_passed": 3})
	if m := toolMessages(conv)["b"]; !strings.Contains(m.Content, "all tests passed") || !strings.Contains(m.Content, "2") {
		t.Fatalf("bash under namespaces: %q", m.Content)
	}
	// The system directories the grader relies on are read-only in here.
	if m := toolMessages(conv)["sys"]; !strings.Contains(m.Content, "Read-only file system") {
		t.Fatalf("agent could write system directories: %q", m.Content)
	}
}

// TestConcurrentEpisodes runs episodes of one env at once, each in its own
// sandbox, as the host does.
func TestConcurrentEpisodes(t *testing.T) {
	b := local.New()
	bcfg, _ := json.Marshal(map[string]any{"isolation": "none", "state_dir": t.TempDir()})
	if ds := b.Configure(context.Background(), schema.Config{Name: "local", JSON: bcfg}, core.SandboxSpec{}); ds.HasErrors() {
		t.Fatal(ds.Err())
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	env := envtest.Serve(t, mbpp.New())
	if ds := env.Configure(context.Background(), schema.Config{Name: "mbpp", JSON: []byte(`{"dataset": "sample.jsonl"}`), BaseDir: sampleDir}); ds.HasErrors() {
		t.Fatal(ds.Err())
	}
	ids := []int{1001, 1007, 1011, 1019}
	sbs := make([]*envtest.BackendSandbox, len(ids))
	for i := range ids {
		sbs[i] = envtest.NewSandbox(t, b, core.SandboxSpec{}, time.Minute)
	}
	errs := make(chan error, len(ids))
	for i, id := range ids {
		p := problem(t, id)
		go func() {
			ctx := context.Background()
			sess, _, err := env.NewEpisode(ctx, envplugin.Episode{ID: fmt.Sprint("c", id), Task: core.Task{ID: fmt.Sprint(id)}, Sandbox: sbs[i]})
			if err != nil {
				errs <- err
				return
			}
			if _, err := sess.Step(ctx, tools(write("s", "solution.py", p.Code))); err != nil {
				errs <- err
				return
			}
			obs, err := sess.Step(ctx, endTurn())
			if err == nil && obs.Reward != 1 {
				err = fmt.Errorf("task %d: reward %v %v", id, obs.Reward, obs.Metrics)
			}
			if _, endErr := sess.End(ctx, ""); err == nil {
				err = endErr
			}
			errs <- err
		}()
	}
	for range ids {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// TestLeftoverProcessesStoppedBeforeGrading: under namespace isolation, a
// process the agent left running is gone when the tests run. The solution
// misbehaves if its heartbeat file is still changing at import time.
func TestLeftoverProcessesStoppedBeforeGrading(t *testing.T) {
	p := problem(t, 1010)
	sol := "import time\n" +
		"def beat():\n    try:\n        return open('/workspace/beat').read()\n    except OSError:\n        return ''\n" +
		"a = beat()\ntime.sleep(0.3)\nALIVE = beat() != a\n" + p.Code + "\n" +
		"if ALIVE:\n    def reverse_digits(n):\n        return -1\n"
	r := newRigIsolated(t, "namespaces", map[string]any{"max_attempts": 1}, core.SandboxSpec{})
	conv, obs := r.run(t, "1010", 3, tools(
		write("s", "/workspace/solution.py", sol),
		bash("bg", "(while true; do date +%s%N > /workspace/beat; sleep 0.02; done) >/dev/null 2>&1 & setsid sh -c 'while true; do sleep 1; done' >/dev/null 2>&1 & sleep 0.3; cat /workspace/beat"),
	))
	if m := toolMessages(conv)["bg"]; !strings.Contains(m.Content, "exit_code: 0") {
		t.Fatalf("background loop did not start: %q", m.Content)
	}
	wantFinal(t, obs, 1, core.FinishPassed, map[string]float64{"tests_passed": 3})
}

// A task's files are in the workspace before the agent's first turn, so
// the agent can read what the task leaves it there.
func TestTaskFilesAreInTheWorkspace(t *testing.T) {
	data := t.TempDir() + "/files.jsonl"
	task := `{"task_id": 7, "text": "Write f(x) as spec.txt says.", "test_list": ["assert f(3) == 9"],` +
		` "files": {"spec.txt": "f(x) returns x squared.\n", "notes/more.txt": "nothing"}}`
	if err := os.WriteFile(data, []byte(task+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := newRig(t, map[string]any{"dataset": data, "show_tests": false, "max_attempts": 1}, core.SandboxSpec{})
	msgs, obs := r.run(t, "7", 5,
		tools(call("c1", "read_file", map[string]string{"path": "spec.txt"})),
		tools(call("c2", "read_file", map[string]string{"path": "notes/more.txt"})),
		tools(call("c3", "write_file", map[string]string{"path": "solution.py", "content": "def f(x):\n    return x * x\n"})),
	)
	var results []string
	for _, m := range msgs {
		if m.Role == core.RoleTool {
			results = append(results, m.Content)
		}
	}
	if len(results) != 3 || results[0] != "f(x) returns x squared.\n" || results[1] != "nothing" {
		t.Fatalf("tool results %q", results)
	}
	if !obs.Done || obs.Reward != 1 {
		t.Errorf("final observation %+v, want the solution written from the spec to pass", obs)
	}
}
