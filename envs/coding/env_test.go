package coding

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/core/sdk/envplugin"
	"github.com/rlhost/rlhost/core/sdk/envplugin/envtest"
	"github.com/rlhost/rlhost/plugins/local"
)

func TestMain(m *testing.M) {
	// The local backend re-executes this test binary as its sandbox helper.
	if local.Reexec() {
		return
	}
	os.Exit(m.Run())
}

// harness is a served coding env plus the real local backend lending it
// sandboxes, as the host wires them.
type harness struct {
	client  *envplugin.Client
	backend *local.Backend
	tasks   map[string]core.Task
}

func newHarness(t *testing.T, set map[string]any) *harness {
	t.Helper()
	return newHarnessFor(t, New(), set)
}

// newHarnessFor is newHarness serving env, which the test keeps.
func newHarnessFor(t *testing.T, env *Env, set map[string]any) *harness {
	t.Helper()
	ctx := context.Background()
	b := local.New()
	bcfg, _ := json.Marshal(map[string]any{"isolation": "none", "state_dir": t.TempDir()})
	if diags := b.Configure(ctx, schema.Config{Name: "local", JSON: bcfg}, core.SandboxSpec{}); diags.HasErrors() {
		t.Fatalf("configure local backend: %v", diags.Err())
	}
	t.Cleanup(func() {
		if err := b.Shutdown(context.Background()); err != nil {
			t.Errorf("shutdown local backend: %v", err)
		}
	})
	client := envtest.Serve(t, env)
	if diags := client.Configure(ctx, schema.Config{Name: "coding", JSON: configJSON(t, set), BaseDir: t.TempDir()}); diags.HasErrors() {
		t.Fatalf("configure coding env: %v", diags.Err())
	}
	ts, err := client.Tasks(ctx)
	if err != nil {
		t.Fatalf("tasks: %v", err)
	}
	h := &harness{client: client, backend: b, tasks: map[string]core.Task{}}
	for _, x := range ts {
		h.tasks[x.ID] = x
	}
	return h
}

// run scores one completion in a fresh sandbox, over gRPC.
func (h *harness) run(t *testing.T, taskID, completion string) envplugin.Observation {
	t.Helper()
	task, ok := h.tasks[taskID]
	if !ok {
		t.Fatalf("no task %q", taskID)
	}
	sb := envtest.NewSandbox(t, h.backend, core.SandboxSpec{}, time.Second)
	conv, obs := envtest.Episode(t, h.client, envplugin.Episode{ID: t.Name(), Task: task, Sandbox: sb}, 1,
		func(int, []core.Message) core.Message {
			return core.Message{Role: core.RoleAssistant, Content: completion}
		})
	if len(conv) < 2 || conv[0].Content != task.Prompt && conv[1].Content != task.Prompt {
		t.Fatalf("conversation does not start with the prompt: %+v", conv)
	}
	if !obs.Done {
		t.Fatalf("episode not done after one reply: %+v", obs)
	}
	return obs
}

func fenced(code string) string { return "Here is my solution.\n```python\n" + code + "\n```\n" }

const bubbleSort = `def sort_list(xs):
    xs = list(xs)
    for i in range(len(xs)):
        for j in range(len(xs) - 1 - i):
            if xs[j] > xs[j + 1]:
                xs[j], xs[j + 1] = xs[j + 1], xs[j]
    return xs`

const kadane = `def max_subarray(nums):
    best = cur = nums[0]
    for x in nums[1:]:
        cur = max(x, cur + x)
        best = max(best, cur)
    return best`

type scoreCase struct {
	name       string
	task       string
	completion string
	reward     float64
	flag       string // metric that must be 1
	finish     string // "" = done, "*" = any
}

func checkScore(t *testing.T, obs envplugin.Observation, tc scoreCase) {
	t.Helper()
	if d := obs.Reward - tc.reward; d > 1e-9 || d < -1e-9 {
		t.Errorf("reward = %v, want %v (metrics %v, info %v)", obs.Reward, tc.reward, obs.Metrics, obs.Info)
	}
	if tc.flag != "" && obs.Metrics[tc.flag] != 1 {
		t.Errorf("metric %s not set: metrics %v, info %v", tc.flag, obs.Metrics, obs.Info)
	}
	finish := tc.finish
	if finish == "" {
		finish = core.FinishDone
	}
	if finish != "*" && obs.FinishReason != finish {
		t.Errorf("finish = %q, want %q", obs.FinishReason, finish)
	}
}

// TestScoring covers the reward rules end to end. Its timeout is generous
// so that correct code never fails on a loaded machine.
func TestScoring(t *testing.T) {
	h := newHarness(t, map[string]any{"timeout": "5s"})
	tests := []scoreCase{
		{"correct fenced", TaskSortList, fenced(bubbleSort), 1, "", ""},
		{"correct answer tag", TaskMaxSubarray, "<answer>\n" + kadane + "\n</answer>", 1, "", ""},
		{"correct raw", TaskMaxSubarray, kadane, 1, "", ""},
		{"partially wrong", TaskSortList, fenced("def sort_list(xs):\n    return list(xs)"), 2.0 / 8, "", ""},
		{"wrong type", TaskSortList, fenced("def sort_list(xs):\n    return tuple(xs)"), 0, "", ""},
		{"banned sorted", TaskSortList, fenced("def sort_list(xs):\n    return sorted(xs)"), -1, "banned", ""},
		{"banned method", TaskSortList, fenced("def sort_list(xs):\n    xs.sort()\n    return xs"), -1, "banned", ""},
		{"syntax error", TaskSortList, fenced("def sort_list(xs)\n    return xs"), -1, "syntax_error", ""},
		{"prose only", TaskSortList, "I cannot do that.", -1, "syntax_error", ""},
		{"blank reply", TaskSortList, "\n  \n", -1, "no_code", ""},
		{"empty fence only", TaskSortList, "```python\n```", -1, "syntax_error", ""},
		{"missing function", TaskSortList, fenced("def sort(xs):\n    return xs"), -1, "load_error", ""},
		{"raises at load", TaskSortList, fenced("raise RuntimeError('no')"), -1, "load_error", ""},
		{"exits at load", TaskSortList, fenced("import sys\nsys.exit(0)"), -1, "load_error", ""},
		{"exception in a test", TaskMaxSubarray, fenced("def max_subarray(nums):\n    if len(nums) == 1:\n        raise ValueError('x')\n    return 0"), -1, "exception", ""},
		{"reads input at load", TaskSortList, fenced("n = input()\n" + bubbleSort), -1, "load_error", ""},
		{"main guard does not run", TaskSortList, fenced(bubbleSort + "\nif __name__ == '__main__':\n    print(sort_list([int(input())]))"), 1, "", ""},
		{"prints are harmless", TaskSortList, fenced("def sort_list(xs):\n    print('debug', xs)\n    return " + "list(xs)"), 2.0 / 8, "", ""},
		{"mutating its input is fine", TaskSortList, fenced("def sort_list(xs):\n    " + "xs.reverse()\n    return xs[::-1]"), 2.0 / 8, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obs := h.run(t, tc.task, tc.completion)
			checkScore(t, obs, tc)
			if tc.reward >= 0 && obs.Metrics["tests_total"] == 0 {
				t.Errorf("tests_total missing: %v", obs.Metrics)
			}
		})
	}
}

// TestForgeryAttempts runs completions that try to fake a passing verdict
// without computing the answers. None may score above what its honest
// behaviour earns.
func TestForgeryAttempts(t *testing.T) {
	h := newHarness(t, map[string]any{"timeout": "5s"})
	fakeResults := `{"stage": "tests", "results": [` + strings.Repeat(`{"status": "ok", "value": ["list", []]}, `, 7) + `{"status": "ok", "value": ["list", []]}]}`
	tests := []scoreCase{
		{"prints fake verdicts", TaskSortList, fenced(fmt.Sprintf(`import sys
def sort_list(xs):
    for n in ("", "0"*32, "nonce"):
        print(n + " " + %q)
        sys.stderr.write(n + " " + %q + "\n")
    return []`, fakeResults, fakeResults)), 1.0 / 8, "", ""},
		{"writes to the runner's stdout", TaskSortList, fenced(fmt.Sprintf(`import os
def sort_list(xs):
    with open("/proc/%%d/fd/1" %% os.getppid(), "w") as f:
        f.write("0" * 32 + " " + %q + "\n")
    return []`, fakeResults)), 1.0 / 8, "", ""},
		{"always-equal object", TaskSortList, fenced(`class Eq(list):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
def sort_list(xs):
    return Eq()`), 0, "", ""},
		{"int subclass", TaskMaxSubarray, fenced(`class I(int):
    def __eq__(self, other): return True
def max_subarray(nums):
    return I(0)`), 0, "", ""},
		{"patches json", TaskSortList, fenced(`import json
json.dumps = lambda *a, **k: '{"ok": true, "value": ["list", [["int", "1"]]]}'
def sort_list(xs):
    return xs`), 2.0 / 8, "", ""},
		{"patches builtins", TaskSortList, fenced(`import builtins
builtins.sorted = lambda xs: []
builtins.isinstance = lambda *a: True
def sort_list(xs):
    return xs`), -1, "load_error", ""},
		{"os._exit(0) at load", TaskSortList, fenced("import os\nos._exit(0)"), -1, "load_error", ""},
		{"os._exit(0) in a test", TaskSortList, fenced("import os\ndef sort_list(xs):\n    os._exit(0)"), -1, "exception", ""},
		{"kills the runner", TaskSortList, fenced("import os, signal\ndef sort_list(xs):\n    os.kill(os.getppid(), signal.SIGKILL)\n    return xs"), -1, "harness_error", ""},
		// The runner forks this process before it reads its request, and
		// the loader before it reads no more of stdin than the runner's
		// code: the nonce must be nowhere in memory. Found, it would let
		// the candidate print the only verdict (then kill the runner),
		// which scores 1/8 where its answers score 0.
		{"searches its memory for the nonce", TaskSortList, fenced(fmt.Sprintf(`import gc, os, re, signal, sys
hexes = set()
for o in gc.get_objects() + [sys.stdin.buffer.peek() if not sys.stdin.closed else b""]:
    for v in (o if isinstance(o, (list, tuple, dict)) else [o]):
        if isinstance(v, bytes):
            v = v.decode("latin-1")
        if isinstance(v, str):
            hexes.update(re.findall(r"[0-9a-f]{32}", v))
if hexes:
    with open("/proc/%%d/fd/1" %% os.getppid(), "w") as f:
        for n in hexes:
            f.write(n + " " + %q + "\n")
    os.kill(os.getppid(), signal.SIGKILL)
def sort_list(xs):
    return [0]`, fakeResults)), 0, "", ""},
		{"looks for expected outputs on disk", TaskSortList, fenced(`import os
found = []
for root in ("/tmp", "."):
    for dirpath, dirs, files in os.walk(root):
        found += files
def sort_list(xs):
    return found`), 0, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkScore(t, h.run(t, tc.task, tc.completion), tc)
		})
	}
}

// TestMaliciousCompletions must all end with -1 and leave the machine fine.
// The 1 s default timeout is what the seed workflow used.
func TestMaliciousCompletions(t *testing.T) {
	h := newHarness(t, nil)
	tests := []scoreCase{
		{"infinite loop in a test", TaskSortList, fenced("def sort_list(xs):\n    while True:\n        pass"), -1, "timeout", core.FinishTimeout},
		{"infinite loop at load", TaskSortList, fenced("while True:\n    pass"), -1, "timeout", core.FinishTimeout},
		{"output flood", TaskSortList, fenced("import sys\ndef sort_list(xs):\n    while True:\n        sys.stdout.write('x' * 65536)\n        sys.stderr.write('y' * 65536)"), -1, "timeout", core.FinishTimeout},
		{"flood of the runner's stdout", TaskSortList, fenced(`import os
def sort_list(xs):
    f = open("/proc/%d/fd/1" % os.getppid(), "w")
    while True:
        f.write("z" * 65536)`), -1, "", "*"},
		{"sleeps in the background", TaskSortList, fenced("import subprocess\nsubprocess.Popen(['sleep', '30'])\ndef sort_list(xs):\n    while True: pass"), -1, "timeout", core.FinishTimeout},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkScore(t, h.run(t, tc.task, tc.completion), tc)
		})
	}
}

func TestOnTestExceptionFail(t *testing.T) {
	h := newHarness(t, map[string]any{"timeout": "5s", "on_test_exception": "fail"})
	// Raises on the single-element tests ([1] and [-1]); right elsewhere.
	code := "def max_subarray(nums):\n    if len(nums) == 1:\n        raise ValueError('x')\n" + strings.SplitN(kadane, "\n", 2)[1]
	obs := h.run(t, TaskMaxSubarray, fenced(code))
	checkScore(t, obs, scoreCase{reward: 7.0 / 9, flag: "exception"})
	if obs.Metrics["test_0"] != 0 || obs.Metrics["test_2"] != 1 || !strings.Contains(obs.Info["error"], "ValueError") {
		t.Errorf("per-test metrics/info wrong: %v %v", obs.Metrics, obs.Info)
	}
}

func TestExecReward(t *testing.T) {
	h := newHarness(t, map[string]any{"timeout": "5s", "reward": "exec", "task": []any{map[string]any{
		"id": "hello", "prompt": "Write a program that prints hello.", "func_name": "main",
		"banned_patterns": []string{"os.system"}, "tests": []string{}, "reference": "",
	}}})
	tests := []scoreCase{
		{"exits 0", "hello", fenced("print('hello')"), 1, "", ""},
		{"exits 1", "hello", fenced("raise SystemExit(1)"), 0, "", ""},
		{"raises", "hello", fenced("1/0"), 0, "", ""},
		{"no code", "hello", " \n\t", 0, "no_code", ""},
		{"banned", "hello", fenced("import os\nos.system('true')"), -1, "banned", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkScore(t, h.run(t, tc.task, tc.completion), tc)
		})
	}
}

func TestExecRewardTimeout(t *testing.T) {
	h := newHarness(t, map[string]any{"reward": "exec", "timeout": "500ms", "tasks": "builtin"})
	checkScore(t, h.run(t, TaskSortList, fenced("while True: pass")), scoreCase{reward: 0, flag: "timeout", finish: core.FinishTimeout})
}

func TestBrokenReferenceIsAnError(t *testing.T) {
	h := newHarness(t, map[string]any{"task": []any{map[string]any{
		"id": "bad", "prompt": "Write f(x).", "func_name": "f",
		"banned_patterns": []string{}, "tests": []string{"1", "0"}, "reference": "lambda x: 1 / x",
	}}})
	ctx := context.Background()
	sb := envtest.NewSandbox(t, h.backend, core.SandboxSpec{}, time.Second)
	sess, _, err := h.client.NewEpisode(ctx, envplugin.Episode{ID: "e1", Task: h.tasks["bad"], Sandbox: sb})
	if err != nil {
		t.Fatalf("new episode: %v", err)
	}
	_, err = sess.Step(ctx, core.Message{Role: core.RoleAssistant, Content: fenced("def f(x):\n    return x")})
	if err == nil || !strings.Contains(err.Error(), "ZeroDivisionError") {
		t.Fatalf("Step error = %v, want the reference's ZeroDivisionError", err)
	}
	if _, err := sess.End(ctx, core.FinishError); err != nil {
		t.Fatalf("end: %v", err)
	}
}

func TestSystemPromptAndEnd(t *testing.T) {
	h := newHarness(t, map[string]any{"system_prompt": "You write Python."})
	ctx := context.Background()
	sb := envtest.NewSandbox(t, h.backend, core.SandboxSpec{}, time.Second)
	sess, obs, err := h.client.NewEpisode(ctx, envplugin.Episode{ID: "e1", Task: h.tasks[TaskSortList], Sandbox: sb})
	if err != nil {
		t.Fatalf("new episode: %v", err)
	}
	if len(obs.Messages) != 2 || obs.Messages[0].Role != core.RoleSystem || obs.Messages[1].Role != core.RoleUser ||
		obs.Messages[1].Content != h.tasks[TaskSortList].Prompt {
		t.Fatalf("first observation = %+v", obs.Messages)
	}
	end, err := sess.End(ctx, core.FinishContextLimit)
	if err != nil {
		t.Fatalf("end: %v", err)
	}
	if !end.Done || end.Reward != 0 || end.Metrics["unscored"] != 1 || end.FinishReason != core.FinishContextLimit {
		t.Fatalf("end of an unscored episode = %+v", end)
	}
}

// TestSpawnedProcessesDieWithTheSandbox checks that a process the candidate
// starts in the background does not outlive its sandbox.
func TestSpawnedProcessesDieWithTheSandbox(t *testing.T) {
	h := newHarness(t, map[string]any{"timeout": "5s"})
	ctx := context.Background()
	info, err := h.backend.Create(ctx, core.SandboxSpec{})
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	sb := &envtest.BackendSandbox{Backend: h.backend, SandboxID: info.ID, DefaultTimeout: time.Second}
	code := fenced(`import subprocess
p = subprocess.Popen(["sleep", "300"])
with open("sleeper.pid", "w") as f:
    f.write(str(p.pid))
def sort_list(xs):
    return list(xs)`)
	_, obs := envtest.Episode(t, h.client, envplugin.Episode{ID: "bg", Task: h.tasks[TaskSortList], Sandbox: sb}, 1,
		func(int, []core.Message) core.Message { return core.Message{Role: core.RoleAssistant, Content: code} })
	checkScore(t, obs, scoreCase{reward: 2.0 / 8})
	data, err := sb.ReadFile(ctx, "sleeper.pid", 100)
	if err != nil {
		t.Fatalf("read pid file: %v", err)
	}
	pid, err := strconv.Atoi(string(data))
	if err != nil {
		t.Fatalf("pid file %q: %v", data, err)
	}
	if err := h.backend.Destroy(ctx, info.ID); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	// Destroy sends SIGKILL; the zombie is reaped by init, so check state.
	for range 100 {
		if !processAlive(pid) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("background process %d outlived its sandbox", pid)
}

// processAlive reports whether pid exists and is not a zombie.
func processAlive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

// TestConcurrentEpisodes runs episodes of both tasks at once on one served
// env, as the host does; the first episodes of each task race to compute
// the cached expected outputs.
func TestConcurrentEpisodes(t *testing.T) {
	h := newHarness(t, map[string]any{"timeout": "10s"})
	t.Run("group", func(t *testing.T) {
		for i := range 6 {
			task, code, want := TaskSortList, bubbleSort, 1.0
			if i%2 == 1 {
				task, code = TaskMaxSubarray, kadane
			}
			if i >= 4 {
				code, want = strings.Replace(code, "def ", "def x", 1), -1
			}
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				if obs := h.run(t, task, fenced(code)); obs.Reward != want {
					t.Errorf("episode %d: reward %v, want %v (%v)", i, obs.Reward, want, obs.Info)
				}
			})
		}
	})
}

func TestCandidateStderrIsReported(t *testing.T) {
	h := newHarness(t, map[string]any{"timeout": "5s"})
	obs := h.run(t, TaskMaxSubarray, fenced("import sys\nsys.stderr.write('warming up\\n')\n"+kadane))
	checkScore(t, obs, scoreCase{reward: 1})
	if !strings.Contains(obs.Info["stderr"], "warming up") {
		t.Errorf("info stderr = %q, want the candidate's stderr", obs.Info["stderr"])
	}
	if obs.Info["extract"] != ExtractFenced {
		t.Errorf("info extract = %q", obs.Info["extract"])
	}
}

// The runner starts from bytecode the sandbox's interpreter compiled once;
// if another interpreter meets that code, the loader stops before running
// anything and the completion is scored from the runner's source instead.
func TestRunnerCodeStaleFallsBackToSource(t *testing.T) {
	env := New()
	h := newHarnessFor(t, env, map[string]any{"timeout": "5s"})
	good := fenced(kadane)
	checkScore(t, h.run(t, TaskMaxSubarray, good), scoreCase{reward: 1})
	env.runner.mu.Lock()
	if env.runner.code == nil {
		env.runner.mu.Unlock()
		t.Fatal("the runner was not compiled for the run")
	}
	real := env.runner.version
	env.runner.version = real + 1 // as if another interpreter had compiled it
	env.runner.mu.Unlock()
	checkScore(t, h.run(t, TaskMaxSubarray, good), scoreCase{reward: 1})
	env.runner.mu.Lock()
	if env.runner.code != nil {
		t.Errorf("stale code kept after the loader refused it")
	}
	env.runner.mu.Unlock()
	checkScore(t, h.run(t, TaskMaxSubarray, good), scoreCase{reward: 1})
	env.runner.mu.Lock()
	defer env.runner.mu.Unlock()
	if env.runner.code == nil || env.runner.version != real {
		t.Errorf("not compiled again after being dropped (version %d, want %d)", env.runner.version, real)
	}
}

func TestParseCompiled(t *testing.T) {
	tests := []struct {
		out     string
		version int
		code    string
		ok      bool
	}{
		{"51118320 e3000000", 51118320, "\xe3\x00\x00\x00", true},
		{"51118320 e3000000\n", 51118320, "\xe3\x00\x00\x00", true},
		{"51118320", 0, "", false},
		{"51118320 ", 0, "", false},
		{"x e3", 0, "", false},
		{"-5 e3", 0, "", false},
		{"51118320 e3g0", 0, "", false},
		{"", 0, "", false},
	}
	for _, tc := range tests {
		v, code, err := parseCompiled(tc.out)
		if (err == nil) != tc.ok || v != tc.version || string(code) != tc.code {
			t.Errorf("parseCompiled(%q) = %d, %q, %v; want %d, %q, ok %v", tc.out, v, code, err, tc.version, tc.code, tc.ok)
		}
	}
}

func FuzzParseCompiled(f *testing.F) {
	f.Add("51118320 e3000000")
	f.Add("1 00")
	f.Fuzz(func(t *testing.T, out string) {
		v, code, err := parseCompiled(out)
		if err != nil {
			return
		}
		if v <= 0 || len(code) == 0 {
			t.Fatalf("accepted %q as version %d, %d bytes", out, v, len(code))
		}
		// What loaderInput frames must parse back the same way.
		in := loaderInput(v, code, []byte("{}"))
		if len(in) != 20+len(code)+2 {
			t.Fatalf("frame of %d bytes for %d bytes of code", len(in), len(code))
		}
	})
}
