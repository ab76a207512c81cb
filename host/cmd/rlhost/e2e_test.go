package main

// End-to-end tests: build the real rlhost binary (and test plugins), then
// drive it as a user would, through its command line, with real plugin
// processes, real sandboxes and real files.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/host/policy/fakeopenai"
)

var (
	rlhostBin string // built once in TestMain
	buildDir  string
)

func TestMain(m *testing.M) {
	// The test binary may be re-executed as a sandbox helper.
	if reexecHelper() {
		return
	}
	dir, err := os.MkdirTemp("", "rlhost-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buildDir = dir
	rlhostBin = filepath.Join(dir, "rlhost")
	out, err := exec.Command("go", "build", "-o", rlhostBin, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build rlhost: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildPlugin builds a plugin main package into the shared build dir.
func buildPlugin(t testing.TB, pkg, name string) string {
	t.Helper()
	out := filepath.Join(buildDir, name)
	if _, err := os.Stat(out); err == nil {
		return out
	}
	b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("build %s: %v\n%s", pkg, err, b)
	}
	return out
}

type result struct {
	code           int
	stdout, stderr string
}

func rlhost(t *testing.T, dir string, args ...string) result {
	t.Helper()
	return rlhostEnv(t, dir, nil, args...)
}

// rlhostEnv runs rlhost with extra environment variables.
func rlhostEnv(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	return rlhostWithin(t, 4*time.Minute, dir, env, args...)
}

// rlhostWithin is rlhostEnv with a time limit of its own, for the jobs that
// train for minutes.
func rlhostWithin(t *testing.T, limit time.Duration, dir string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, rlhostBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run rlhost %v: %v", args, err)
	}
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func readTrajectories(t testing.TB, path string) []core.Trajectory {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []core.Trajectory
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var tr core.Trajectory
		if err := json.Unmarshal(sc.Bytes(), &tr); err != nil {
			t.Fatalf("bad trajectory line: %v", err)
		}
		out = append(out, tr)
	}
	return out
}

// runSandboxes lists the backend's records of the run whose outputs are
// in outDir (its rlhost.run label). Other processes on the machine may own
// sandboxes in the same state directory; only this run's are the test's.
func runSandboxes(t *testing.T, dir, outDir string) result {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(outDir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var sum struct {
		RunID string `json:"run_id"`
	}
	if err := json.Unmarshal(b, &sum); err != nil || sum.RunID == "" {
		t.Fatalf("summary.json has no run id: %s %v", b, err)
	}
	return rlhost(t, dir, "sandbox", "list", "--json", "--label", "rlhost.run="+sum.RunID)
}

// processesOf lists live processes whose executable or arguments mention
// path: every plugin and sandbox helper of a test binary does.
func processesOf(path string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := fmt.Sscanf(e.Name(), "%d", new(int)); err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if bytes.Contains(stat, []byte(") Z ")) {
			continue // a zombie waiting for its parent is not a live process
		}
		if bytes.Contains(cmdline, []byte(path)) {
			out = append(out, e.Name()+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return out
}

func waitNoProcesses(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		left := processesOf(path)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes left behind:\n%s", strings.Join(left, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestVersionAndHelp(t *testing.T) {
	r := rlhost(t, ".", "version")
	if r.code != 0 || !strings.Contains(r.stdout, "rlhost ") {
		t.Fatalf("version: %+v", r)
	}
	for _, cmd := range [][]string{{"run", "--help"}, {"validate", "--help"}, {"plugins", "--help"}, {"sandbox", "exec", "--help"}, {"sandbox", "list", "--help"}, {"sandbox", "rm", "--help"}} {
		r := rlhost(t, ".", cmd...)
		if r.code != 0 || !strings.Contains(r.stderr+r.stdout, "Usage: rlhost") {
			t.Errorf("%v: code %d, output %q", cmd, r.code, r.stderr+r.stdout)
		}
	}
	if r := rlhost(t, ".", "frobnicate"); r.code == 0 || !strings.Contains(r.stderr, "unknown command") {
		t.Errorf("unknown command: %+v", r)
	}
}

// Bad configs give file:line:col diagnostics and a non-zero exit, no panic.
func TestBadConfigDiagnostics(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, src, want string
	}{
		{"syntax", "run {\n  steps = \n}\n", "bad.hcl:2:11: Error: Invalid expression"},
		{"unknown attribute", "run {\n  stepz = 1\n}\n", "bad.hcl:2:3: Error: Unsupported argument"},
		{"wrong type", "run {\n  steps = \"x\"\n}\n", "bad.hcl:2:12: Error: Unsuitable value type"},
		{"unknown plugin", "sandbox \"s\" {\n  backend = \"local\"\n}\nenv \"e\" {\n  plugin = \"nosuchenv\"\n}\npolicy \"p\" {\n  provider = \"replay\"\n  file = \"x\"\n}\n", "unknown env plugin \"nosuchenv\""},
		{"unknown backend attribute", "sandbox \"s\" {\n  backend = \"local\"\n  isolaton = \"none\"\n}\nenv \"coding\" {}\npolicy \"p\" {\n  provider = \"replay\"\n  file = \"x\"\n}\n", "bad.hcl:3:3: Error: Unsupported argument"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			write(t, dir, "bad.hcl", tc.src)
			r := rlhost(t, dir, "validate", "bad.hcl")
			if r.code == 0 {
				t.Fatalf("validate accepted a bad config: %+v", r)
			}
			if !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("stderr does not mention %q:\n%s", tc.want, r.stderr)
			}
			if strings.Contains(r.stderr, "panic") || strings.Contains(r.stderr, "goroutine ") {
				t.Fatalf("panic:\n%s", r.stderr)
			}
		})
	}
}

// A file that is not a plugin is reported as such.
func TestNotAPlugin(t *testing.T) {
	dir := t.TempDir()
	script := write(t, dir, "fake-plugin", "#!/bin/sh\necho hello from a shell script\nsleep 5\n")
	os.Chmod(script, 0o755)
	write(t, dir, "job.hcl", `
sandbox "s" { backend = "local" }
env "e" { plugin = "./fake-plugin" }
policy "p" {
  provider = "replay"
  file = "x.jsonl"
}
`)
	r := rlhost(t, dir, "validate", "job.hcl")
	if r.code == 0 || !strings.Contains(r.stderr, "not a working rlhost plugin") {
		t.Fatalf("want a clear not-a-plugin error, got %+v", r)
	}
	waitNoProcesses(t, script)
}

func TestPluginsListsBuiltins(t *testing.T) {
	r := rlhost(t, ".", "plugins", "--json")
	if r.code != 0 {
		t.Fatalf("plugins: %+v", r)
	}
	var rows []pluginRow
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil {
		t.Fatalf("plugins --json: %v\n%s", err, r.stdout)
	}
	seen := map[string]bool{}
	for _, row := range rows {
		seen[row.Info.Kind+"/"+row.Info.Name] = row.Error == "" && row.Info.Version != ""
	}
	for _, want := range []string{"env/coding", "sandbox/local", "sandbox/daytona", "sandbox/aviato"} {
		if !seen[want] {
			t.Errorf("plugins does not list a working %s: %v", want, seen)
		}
	}
	// The listing names settings as a job file writes them (limits.disk),
	// never by their wire names (disk_bytes).
	r = rlhost(t, ".", "plugins")
	if r.code != 0 || !strings.Contains(r.stdout, "limits.disk") || strings.Contains(r.stdout, "_bytes") {
		t.Errorf("plugins listing: %+v", r)
	}
}

// An env plugin killed mid-run: its episode is recorded as errored, the
// plugin restarts, and the run finishes the remaining episodes.
func TestEnvPluginCrashRestart(t *testing.T) {
	crash := buildPlugin(t, "./testdata/probeenv", "probeenv")
	dir := t.TempDir()
	write(t, dir, "replay.jsonl", `{"task_id":"t0","completions":["ok"]}
{"task_id":"t1","completions":["CRASH"]}
{"task_id":"t2","completions":["ok"]}
{"task_id":"t3","completions":["ok"]}
`)
	write(t, dir, "job.hcl", fmt.Sprintf(`
run {
  name = "crash"
  steps = 2
  batch_size = 4
  concurrency = 1
}
sandbox "s" {
  backend = "local"
}
env "crash" {
  plugin = %q
  marker = "marker"
}
policy "p" {
  provider = "replay"
  file = "replay.jsonl"
}
output { dir = "out" }
`, crash))
	r := rlhost(t, dir, "run", "job.hcl")
	if r.code != 0 {
		t.Fatalf("run failed: %+v", r)
	}
	trajs := readTrajectories(t, filepath.Join(dir, "out", "trajectories.jsonl"))
	if len(trajs) != 8 {
		t.Fatalf("got %d trajectories, want 8", len(trajs))
	}
	errored, ok := 0, 0
	for _, tr := range trajs {
		switch {
		case tr.Error != "":
			errored++
			if tr.TaskID != "t1" || !strings.Contains(tr.Error, "plugin process exited") {
				t.Errorf("unexpected error on %s: %s", tr.TaskID, tr.Error)
			}
		case tr.Reward == 1:
			ok++
		}
	}
	if errored != 1 || ok != 7 {
		t.Fatalf("errored %d, ok %d; want 1 and 7", errored, ok)
	}
	waitNoProcesses(t, crash)
}

// The replay demo through the coding env: rewards reach disk with metrics.
func TestRunCodingReplay(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "replay.jsonl", `{"task_id":"sort_list","completions":["def sort_list(xs):\n    out = []\n    for x in xs:\n        i = 0\n        while i < len(out) and out[i] <= x:\n            i += 1\n        out.insert(i, x)\n    return out\n", "def sort_list(xs):\n    return sorted(xs)\n", "def sort_list(xs):\n    while True:\n        pass\n", "def sort_list(xs):\n    import sys\n    while True:\n        sys.stdout.write('x' * 65536)\n", "import os\ndef sort_list(xs):\n    while True:\n        os.fork()\n"]}
{"task_id":"max_subarray","completions":["def max_subarray(xs):\n    best = cur = xs[0]\n    for x in xs[1:]:\n        cur = max(x, cur + x)\n        best = max(best, cur)\n    return best\n", "def max_subarray(xs) return 0", "def max_subarray(xs):\n    raise ValueError('no')\n", "def max_subarray(xs):\n    return 0\n", "def max_subarray(xs):\n    return sum(xs)\n"]}
`)
	write(t, dir, "job.hcl", `
run {
  name = "coding"
  batch_size = 2
  group_size = 5
  concurrency = 10
}
sandbox "local" {
  backend = "local"
  timeout = "2s"
  limits {
    pids = 64
    memory = "256MiB"
  }
}
env "coding" {
  sandbox = sandbox.local
  tasks = "builtin"
  timeout = "2s"
}
policy "replay" {
  provider = "replay"
  file = "replay.jsonl"
}
output { dir = "out" }
`)
	r := rlhost(t, dir, "run", "job.hcl")
	if r.code != 0 {
		t.Fatalf("run failed: %+v", r)
	}
	trajs := readTrajectories(t, filepath.Join(dir, "out", "trajectories.jsonl"))
	if len(trajs) != 10 {
		t.Fatalf("got %d trajectories, want 10", len(trajs))
	}
	byCompletion := map[string]core.Trajectory{}
	for _, tr := range trajs {
		if tr.Error != "" {
			t.Errorf("episode %s/%d errored: %s", tr.TaskID, tr.Index, tr.Error)
		}
		byCompletion[fmt.Sprintf("%s/%d", tr.TaskID, tr.Index)] = tr
	}
	want := map[string]float64{
		"sort_list/0": 1, "sort_list/1": -1, "sort_list/2": -1, "sort_list/3": -1, "sort_list/4": -1,
		"max_subarray/0": 1, "max_subarray/1": -1, "max_subarray/2": -1,
	}
	for k, w := range want {
		if got := byCompletion[k].Reward; got != w {
			t.Errorf("%s: reward %v, want %v (metrics %v info %v)", k, got, w, byCompletion[k].Metrics, byCompletion[k].Info)
		}
	}
	if got := byCompletion["max_subarray/3"].Reward; got <= 0 || got >= 1 {
		t.Errorf("a partly wrong answer should get a fraction, got %v", got)
	}
	for _, name := range []string{"metrics.jsonl", "summary.json"} {
		if _, err := os.Stat(filepath.Join(dir, "out", name)); err != nil {
			t.Errorf("missing %s: %v", name, err)
		}
	}
	if !strings.Contains(r.stdout, "step 0 (1/1)") {
		t.Errorf("no progress line in output:\n%s", r.stdout)
	}
	// The terminal's step numbers are metrics.jsonl's, and the summary says
	// where the files are. (Not a terminal: no status-line escapes.)
	metrics, err := os.ReadFile(filepath.Join(dir, "out", "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(metrics)), "\n") {
		var m core.StepMetrics
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(r.stdout, fmt.Sprintf("\nstep %d (%d/1)  episodes %d ", m.Step, m.Step+1, m.Episodes)) {
			t.Errorf("metrics.jsonl has step %d; stdout does not show it:\n%s", m.Step, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, "  output    out\n") || strings.Contains(r.stdout, "\x1b[") {
		t.Errorf("final summary lacks the output dir, or has terminal escapes:\n%s", r.stdout)
	}
	// Running again into the same directory is refused unless asked.
	if r2 := rlhost(t, dir, "run", "job.hcl"); r2.code == 0 || !strings.Contains(r2.stderr, "already holds a run") {
		t.Errorf("second run into the same dir: %+v", r2)
	}
	// --overwrite replaces the whole earlier run, the model outputs of a
	// training run included; a stale checkpoint would outrank the new
	// run's on --resume.
	stale := filepath.Join(dir, "out", "checkpoints", "step-000099")
	if err := os.MkdirAll(stale, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "out"), "rewards.png", "old")
	if r2 := rlhost(t, dir, "run", "job.hcl", "--overwrite"); r2.code != 0 {
		t.Errorf("--overwrite: %+v", r2)
	}
	for _, p := range []string{"out/checkpoints", "out/rewards.png"} {
		if _, err := os.Stat(filepath.Join(dir, p)); !os.IsNotExist(err) {
			t.Errorf("--overwrite left %s of the earlier run: %v", p, err)
		}
	}
	waitNoProcesses(t, rlhostBin)
}

// Ctrl-C mid-run: rlhost exits cleanly, leaving no plugin or sandbox process
// behind, and the trajectories already finished stay on disk.
func TestInterruptCleansUp(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "replay.jsonl", sleepyReplay)
	write(t, dir, "job.hcl", `
run {
  name = "interrupt"
  steps = 5
  batch_size = 2
  group_size = 3
  concurrency = 6
}
sandbox "local" {
  backend = "local"
  timeout = "90s"
}
env "coding" {
  tasks = "builtin"
  timeout = "90s"
}
policy "replay" {
  provider = "replay"
  file = "replay.jsonl"
}
output { dir = "out" }
`)
	// Its own process group, so the signal below reaches every process in
	// it, as a terminal's Ctrl-C does.
	cmd, out, errb := startRun(t, dir, nil, true, "run", "job.hcl")
	waitUntil(t, cmd, "sandboxed programs never started", pythonUnder(cmd.Process.Pid), out, errb)
	time.Sleep(500 * time.Millisecond)
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waitExit(t, cmd, 60*time.Second, errb)
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Errorf("exit code %d, want 130\nstderr:%s", code, errb.String())
	}
	waitNoProcesses(t, rlhostBin)
	trajs := readTrajectories(t, filepath.Join(dir, "out", "trajectories.jsonl"))
	for _, tr := range trajs {
		if tr.FinishReason != core.FinishCancelled {
			t.Errorf("episode %s/%d finished %q, want cancelled", tr.TaskID, tr.Index, tr.FinishReason)
		}
	}
	var sum struct {
		Interrupted bool `json:"interrupted"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "out", "summary.json"))
	if err != nil || json.Unmarshal(b, &sum) != nil || !sum.Interrupted {
		t.Errorf("summary.json does not say interrupted: %s %v", b, err)
	}
	// No sandbox of that run is left in the backend's records either.
	r := runSandboxes(t, dir, filepath.Join(dir, "out"))
	if r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("sandboxes left: %+v", r)
	}
}

func TestSandboxExecJSON(t *testing.T) {
	r := rlhost(t, t.TempDir(), "sandbox", "exec", "--json", "--timeout", "2s", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
	if r.code != 0 {
		t.Fatalf("sandbox exec: %+v", r)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, r.stdout)
	}
	if res["exit_code"] != float64(3) || res["stdout"] != "out\n" || res["stderr"] != "err\n" || res["timed_out"] != false {
		t.Errorf("result = %v", res)
	}
	if _, ok := res["duration_ms"]; !ok {
		t.Errorf("no duration_ms in %v", res)
	}
	r = rlhost(t, t.TempDir(), "sandbox", "exec", "--json", "--timeout", "500ms", "--", "sleep", "30")
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || res["timed_out"] != true {
		t.Errorf("timeout not reported: %s %v", r.stdout, err)
	}
	// Without --json the command's exit code and output pass through.
	r = rlhost(t, t.TempDir(), "sandbox", "exec", "--", "sh", "-c", "echo hi; exit 7")
	if r.code != 7 || r.stdout != "hi\n" {
		t.Errorf("plain exec: %+v", r)
	}
	waitNoProcesses(t, rlhostBin)
}

// The example external plugin builds to its own binary and loads by path.
func TestExternalEnvPluginByPath(t *testing.T) {
	echo := buildPlugin(t, "../../../examples/echo-env", "echo-env")
	dir := t.TempDir()
	if err := os.Symlink(echo, filepath.Join(dir, "echo-env")); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "replay.jsonl", `{"task_id":"echo-0","completions":["hello","nope"]}
{"task_id":"echo-1","completions":[" sandbox\n","hello"]}
`)
	write(t, dir, "job.hcl", `
run {
  batch_size = 2
  group_size = 2
}
sandbox "box" { backend = "local" }
env "echo" {
  plugin = "./echo-env"
  words  = ["hello", "sandbox"]
}
policy "p" {
  provider = "replay"
  file = "replay.jsonl"
}
output { dir = "out" }
`)
	if r := rlhost(t, dir, "validate", "job.hcl"); r.code != 0 {
		t.Fatalf("validate: %+v", r)
	}
	r := rlhost(t, dir, "run", "job.hcl")
	if r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	got := map[string]float64{}
	for _, tr := range readTrajectories(t, filepath.Join(dir, "out", "trajectories.jsonl")) {
		got[fmt.Sprintf("%s/%d", tr.TaskID, tr.Index)] = tr.Reward
	}
	want := map[string]float64{"echo-0/0": 1, "echo-0/1": 0, "echo-1/0": 1, "echo-1/1": 0}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: reward %v, want %v (all %v)", k, got[k], w, got)
		}
	}
	// Its schema is enforced by the host: a wrong type is a located error.
	write(t, dir, "bad.hcl", "sandbox \"box\" { backend = \"local\" }\nenv \"echo\" {\n  plugin = \"./echo-env\"\n  words  = 3\n}\npolicy \"p\" {\n  provider = \"replay\"\n  file = \"replay.jsonl\"\n}\n")
	if r := rlhost(t, dir, "validate", "bad.hcl"); r.code == 0 || !strings.Contains(r.stderr, "bad.hcl:4:") {
		t.Errorf("bad plugin setting not located: %+v", r)
	}
}

// SIGKILL of the host: no plugin or sandbox process survives it, and the
// next start reaps what the dead run left in the backend's records.
func TestHostKilledLeavesNoOrphans(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "replay.jsonl", sleepyReplay)
	write(t, dir, "job.hcl", `
run {
  batch_size = 2
  group_size = 2
}
sandbox "local" {
  backend = "local"
  timeout = "90s"
}
env "coding" {
  tasks = "builtin"
  timeout = "90s"
}
policy "replay" {
  provider = "replay"
  file = "replay.jsonl"
}
output { dir = "out" }
`)
	cmd, out, errb := startRun(t, dir, nil, false, "run", "job.hcl")
	waitUntil(t, cmd, "sandboxed programs never started", pythonUnder(cmd.Process.Pid), out, errb)
	time.Sleep(300 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	waitNoProcesses(t, rlhostBin)
	// The dead run's sandboxes are gone from the records: the backend's
	// parent-death clean-up or, failing that, the reaping at the next start
	// (which `rm --orphans` triggers) removes them.
	r := rlhost(t, dir, "sandbox", "rm", "--orphans")
	if r.code != 0 {
		t.Fatalf("rm --orphans: %+v", r)
	}
	r = runSandboxes(t, dir, filepath.Join(dir, "out"))
	if r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("sandboxes left after reaping: %+v", r)
	}
}

// Single-shot envs: a group's episodes share their prompt, so the policy is
// asked once per group with n = group size, as vLLM batches best.
func TestGroupAskedOnceWithN(t *testing.T) {
	var mu sync.Mutex
	var ns []int
	srv := fakeopenai.New(func(req fakeopenai.ChatRequest) fakeopenai.Reply {
		mu.Lock()
		ns = append(ns, req.NumChoices())
		mu.Unlock()
		var cs []fakeopenai.ReplyChoice
		for i := 0; i < req.NumChoices(); i++ {
			cs = append(cs, fakeopenai.Text(fmt.Sprintf("def sort_list(xs):\n    return %d\n", i)))
		}
		return fakeopenai.Reply{Choices: cs, IgnoreN: true}
	})
	defer srv.Close()
	srv.SetModels("m")
	dir := t.TempDir()
	write(t, dir, "job.hcl", fmt.Sprintf(`
run {
  batch_size = 2
  group_size = 4
  concurrency = 8
}
sandbox "local" { backend = "local" }
env "coding" { tasks = "builtin" }
policy "fake" {
  provider = "openai"
  base_url = %q
  model = "m"
}
output { dir = "out" }
`, srv.URL))
	r := rlhost(t, dir, "run", "job.hcl")
	if r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ns) != 2 || ns[0] != 4 || ns[1] != 4 {
		t.Fatalf("policy requests asked for n = %v, want [4 4]", ns)
	}
	if n := len(readTrajectories(t, filepath.Join(dir, "out", "trajectories.jsonl"))); n != 8 {
		t.Fatalf("%d trajectories, want 8", n)
	}
}

// sleepyReplay makes both built-in coding tasks run for a minute, so a test
// can act on a run while its sandboxes are busy.
const sleepyReplay = `{"task_id":"sort_list","completions":["import time\ntime.sleep(60)\ndef sort_list(xs): return xs\n"]}
{"task_id":"max_subarray","completions":["import time\ntime.sleep(60)\ndef max_subarray(xs): return 0\n"]}
`

// startRun starts rlhost in dir in the background (in its own process group
// when group is set) and returns it with its captured output.
func startRun(t *testing.T, dir string, env []string, group bool, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(rlhostBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	if group {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, &out, &errb
}

// waitUntil polls cond for up to a minute; on failure it kills cmd and
// fails with msg and rlhost's output.
func waitUntil(t *testing.T, cmd *exec.Cmd, msg string, cond func() bool, out, errb *bytes.Buffer) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("%s\nstdout:%s\nstderr:%s", msg, out.String(), errb.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitExit waits for cmd to exit after a signal, killing it and failing
// the test if it takes longer than limit.
func waitExit(t *testing.T, cmd *exec.Cmd, limit time.Duration, errb *bytes.Buffer) {
	t.Helper()
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(limit):
		cmd.Process.Kill()
		<-done
		t.Fatalf("rlhost did not exit after the signal\nstderr:%s", errb.String())
	}
}

// pythonUnder reports whether a python3 process runs anywhere below pid:
// once it does, the run's sandboxed programs have started.
func pythonUnder(pid int) func() bool {
	return func() bool {
		parent := map[int]int{}
		var pythons []int
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			var p int
			if _, err := fmt.Sscanf(e.Name(), "%d", &p); err != nil {
				continue
			}
			stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
			if err != nil {
				continue
			}
			// The fields after the command name (which may hold spaces) start
			// with the state and the parent pid.
			rest := stat[bytes.LastIndexByte(stat, ')')+1:]
			var state string
			var ppid int
			if _, err := fmt.Sscanf(string(rest), " %s %d", &state, &ppid); err != nil {
				continue
			}
			parent[p] = ppid
			cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if bytes.Contains(bytes.SplitN(cmdline, []byte{0}, 2)[0], []byte("python3")) {
				pythons = append(pythons, p)
			}
		}
		for _, p := range pythons {
			for seen := 0; p > 1 && seen < 64; seen++ {
				if p = parent[p]; p == pid {
					return true
				}
			}
		}
		return false
	}
}

// A panic in one episode's Step fails that episode alone: the episodes in
// flight beside it pass, the plugin is not restarted, and its stack is
// printed once, as one block. A panic the SDK cannot catch (in a goroutine
// of the plugin's own) kills the plugin; its raw trace is one block too.
func TestEnvPluginPanic(t *testing.T) {
	probe := buildPlugin(t, "./testdata/probeenv", "probeenv")
	for _, tc := range []struct {
		reply, err, block string
		// A crash takes the episodes in flight with it, so the crashing
		// case runs one episode at a time: the others pass, before the
		// crash and after the restart.
		concurrency int
	}{
		{"PANIC", "plugin panicked in rlhost.v1.Environment/Step: assignment to entry in nil map", "  stack=\n  | goroutine ", 4},
		{"GOPANIC", "plugin process exited", "plugin crashed:\n  output=\n  | panic: probeenv: goroutine panic\n", 1},
	} {
		t.Run(tc.reply, func(t *testing.T) {
			dir := t.TempDir()
			write(t, dir, "replay.jsonl", fmt.Sprintf(`{"task_id":"t0","completions":["ok"]}
{"task_id":"t1","completions":[%q]}
{"task_id":"t2","completions":["ok"]}
{"task_id":"t3","completions":["ok"]}
`, tc.reply))
			write(t, dir, "job.hcl", fmt.Sprintf(`
run {
  batch_size = 4
  concurrency = %d
}
sandbox "s" { backend = "local" }
env "probe" {
  plugin = %q
  marker = "marker"
}
policy "p" {
  provider = "replay"
  file = "replay.jsonl"
}
output { dir = "out" }
`, tc.concurrency, probe))
			r := rlhost(t, dir, "run", "job.hcl")
			if r.code != 0 {
				t.Fatalf("run: %+v", r)
			}
			for _, tr := range readTrajectories(t, filepath.Join(dir, "out", "trajectories.jsonl")) {
				if tr.TaskID == "t1" {
					if !strings.Contains(tr.Error, tc.err) {
						t.Errorf("t1: error %q, want %q", tr.Error, tc.err)
					}
				} else if tc.reply == "PANIC" && (tr.Error != "" || tr.Reward != 1) {
					t.Errorf("%s beside the panic: reward %v, error %q", tr.TaskID, tr.Reward, tr.Error)
				}
			}
			if !strings.Contains(r.stderr, tc.block) {
				t.Errorf("stderr lacks the block %q:\n%s", tc.block, r.stderr)
			}
			for _, line := range strings.Split(r.stderr, "\n") {
				if strings.Contains(line, "[ERROR]") && strings.Contains(line, "goroutine ") {
					t.Errorf("a trace line was logged as its own entry: %q", line)
				}
			}
			if tc.reply == "PANIC" && strings.Contains(r.stderr, "restarting") {
				t.Errorf("the plugin was restarted after a recovered panic:\n%s", r.stderr)
			}
		})
	}
	waitNoProcesses(t, probe)
}

// The echo-env example ships a complete job file; it runs as shipped.
func TestEchoExampleJobFile(t *testing.T) {
	echo := buildPlugin(t, "../../../examples/echo-env", "echo-env")
	job, err := filepath.Abs("../../../examples/echo-env/echo.hcl")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	r := rlhost(t, dir, "run", job, "--var", "plugin="+echo, "--out", "out", "--dry-run")
	if r.code != 0 {
		t.Fatalf("run %s: %+v", job, r)
	}
	trajs := readTrajectories(t, filepath.Join(dir, "out", "trajectories.jsonl"))
	if len(trajs) != 6 {
		t.Fatalf("%d trajectories, want 6", len(trajs))
	}
	for _, tr := range trajs {
		if want := float64(1 - tr.Index); tr.Error != "" || tr.Reward != want {
			t.Errorf("%s/%d: reward %v error %q; want %v", tr.TaskID, tr.Index, tr.Reward, tr.Error, want)
		}
	}
}

// The README's sample of `make run` is what `make run` prints today, up to
// run ids, numbers, durations and timestamps.
func TestReadmeSampleMatchesMakeRun(t *testing.T) {
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), "<!-- make-run-output")
	if !ok {
		t.Fatal("README has no make-run-output sample")
	}
	_, block, _ := strings.Cut(after, "```text\n")
	sample, _, ok := strings.Cut(block, "```")
	if !ok {
		t.Fatal("the README's make-run-output sample is not a closed ```text block")
	}
	job, err := filepath.Abs("../../../examples/quickstart.hcl")
	if err != nil {
		t.Fatal(err)
	}
	// make run: $(BIN) run examples/quickstart.hcl --overwrite; shortened
	// here, which only changes how often the same lines repeat.
	r := rlhost(t, t.TempDir(), "run", job, "--overwrite", "--steps", "2", "--var", "warmup_steps=10")
	if r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	got, want := collapseRepeats(normaliseRunOutput(r.stdout)), collapseRepeats(normaliseRunOutput(sample))
	if got != want {
		t.Errorf("README sample and today's output differ (normalised):\n--- README\n%s\n--- rlhost run\n%s", want, got)
	}
}

// collapseRepeats drops a line, or a pair of lines, that repeats the one
// just before it, so outputs that differ only in their number of steps
// compare equal once their numbers are normalised.
func collapseRepeats(s string) string {
	lines := strings.Split(s, "\n")
	for k := 1; k <= 2; k++ {
		var out []string
		for _, l := range lines {
			out = append(out, l)
			if n := len(out); n >= 2*k && slices.Equal(out[n-k:], out[n-2*k:n-k]) {
				out = out[:n-k]
			}
		}
		lines = out
	}
	return strings.Join(lines, "\n")
}

var (
	runIDPattern     = regexp.MustCompile(`[a-z-]+-\d{8}-\d{6}-[0-9a-f]+`)
	configPattern    = regexp.MustCompile(`\(config [^)]*\)`)
	timePattern      = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`)
	durationPattern  = regexp.MustCompile(`\b(\d+(\.\d+)?(h|ms|m|s|µs))+\b`)
	numberPattern    = regexp.MustCompile(`-?\d+(\.\d+)?`)
	trainLinePattern = regexp.MustCompile(`train: .*`)
	byStepPattern    = regexp.MustCompile(`by step [-N …()a-z]*`)
	spacesPattern    = regexp.MustCompile(` +`)
)

func normaliseRunOutput(s string) string {
	s = runIDPattern.ReplaceAllString(s, "RUNID")
	s = configPattern.ReplaceAllString(s, "(config FILE)")
	s = timePattern.ReplaceAllString(s, "TIME")
	s = durationPattern.ReplaceAllString(s, "DURATION")
	s = trainLinePattern.ReplaceAllString(s, "train: UPDATE")
	s = numberPattern.ReplaceAllString(s, "N")
	s = byStepPattern.ReplaceAllString(s, "by step N")
	s = spacesPattern.ReplaceAllString(s, " ")
	return strings.TrimSpace(s)
}

// The rules policy answers from what the env said: here it reads the word
// out of each echo prompt, so one rule solves every task.
func TestRulesPolicyRun(t *testing.T) {
	echo := buildPlugin(t, "../../../examples/echo-env", "echo-env")
	dir := t.TempDir()
	write(t, dir, "rules.jsonl", `{"when": "nothing else: (\\w+)$", "reply": "{{1}}"}`+"\n")
	write(t, dir, "job.hcl", fmt.Sprintf(`
run {
  batch_size = 3
  group_size = 2
}
sandbox "box" { backend = "local" }
env "echo" {
  plugin = %q
  words  = ["alpha", "beta", "gamma"]
}
policy "rules" {
  provider = "rules"
  file     = "rules.jsonl"
}
output { dir = "out" }
`, echo))
	r := rlhost(t, dir, "run", "job.hcl")
	if r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	trajs := readTrajectories(t, filepath.Join(dir, "out", "trajectories.jsonl"))
	if len(trajs) != 6 {
		t.Fatalf("%d trajectories", len(trajs))
	}
	for _, tr := range trajs {
		if tr.Reward != 1 {
			t.Errorf("%s/%d: reward %v (error %q)", tr.TaskID, tr.Index, tr.Reward, tr.Error)
		}
	}
}

// notesToColleagues are phrases that address the team, not a user.
var notesToColleagues = []*regexp.Regexp{
	regexp.MustCompile(`\(proposed`), regexp.MustCompile(`proposed readme`), regexp.MustCompile(`closing note`),
	regexp.MustCompile(`\bthe lead\b`), regexp.MustCompile(`helper's notes`), regexp.MustCompile(`\btodo\b`),
	regexp.MustCompile(`the seed workflow`), regexp.MustCompile(`\bas before\b`), regexp.MustCompile(`recovered from`),
	regexp.MustCompile(`\bissue \d+`), regexp.MustCompile(`\(stop \d+\)`), regexp.MustCompile(`\bstop \d+:`),
}

// Docs are for users: no proposal titles, no notes to colleagues.
func TestDocsReadAsUserDocs(t *testing.T) {
	files, _ := filepath.Glob("../../../docs/*.md")
	files = append(files, "../../../README.md", "../../../BENCHMARKS.md", "../../../examples/echo-env/README.md",
		"../../../examples/python-env/README.md")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lower := strings.ToLower(string(b))
		for _, bad := range notesToColleagues {
			if bad.MatchString(lower) {
				t.Errorf("%s contains %q", filepath.Base(f), bad.FindString(lower))
			}
		}
	}
}

// An env that runs no commands needs no sandbox block, and no backend is
// started for it.
func TestEnvWithoutSandbox(t *testing.T) {
	pure := buildPlugin(t, "./testdata/pureenv", "pureenv")
	dir := t.TempDir()
	write(t, dir, "replay.jsonl", `{"task_id":"alpha","completions":["alpha","nope"]}
{"task_id":"beta","completions":["beta","beta"]}
`)
	write(t, dir, "job.hcl", fmt.Sprintf(`
run {
  batch_size = 2
  group_size = 2
}
env "pure" { plugin = %q }
policy "replay" {
  provider = "replay"
  file     = "replay.jsonl"
}
output { dir = "out" }
`, pure))
	if r := rlhost(t, dir, "validate", "job.hcl"); r.code != 0 || !strings.Contains(r.stdout, "sandbox  none") {
		t.Fatalf("validate: %+v", r)
	}
	r := rlhost(t, dir, "run", "job.hcl")
	if r.code != 0 || !strings.Contains(r.stdout, "sandbox none") {
		t.Fatalf("run: %+v", r)
	}
	sum := 0.0
	for _, tr := range readTrajectories(t, filepath.Join(dir, "out", "trajectories.jsonl")) {
		if tr.Error != "" || tr.SandboxID != "" {
			t.Errorf("%s/%d: error %q sandbox %q", tr.TaskID, tr.Index, tr.Error, tr.SandboxID)
		}
		sum += tr.Reward
	}
	if sum != 3 {
		t.Errorf("rewards sum to %v, want 3", sum)
	}
	if strings.Contains(r.stderr, "sandbox/") {
		t.Errorf("a backend plugin was started: %s", r.stderr)
	}
}
