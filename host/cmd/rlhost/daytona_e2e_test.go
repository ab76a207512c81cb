package main

// The same coding job on Daytona: a one-line backend switch, run end to end
// through the real Daytona Go SDK against a wire-level fake of its API.

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlhost/rlhost/plugins/daytona/fakedaytona"
)

const daytonaJob = `
variable "backend" { default = "local" }
run {
  name = "dt"
  steps = %d
  batch_size = 2
  group_size = 3
  concurrency = 6
}
sandbox "box" {
  backend = var.backend
  timeout = "%s"
  labels = { team = "rl" }
  api_url = %q
}
env "coding" {
  tasks = "builtin"
  timeout = "%s"
}
policy "replay" {
  provider = "replay"
  file = "replay.jsonl"
}
output { dir = "out" }
`

func startFakeDaytona(t *testing.T) *fakedaytona.Server {
	t.Helper()
	srv, err := fakedaytona.New(fakedaytona.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv
}

func daytonaEnv(t *testing.T) []string {
	stateDir := t.TempDir()
	return []string{"DAYTONA_API_KEY=" + fakedaytona.DefaultAPIKey, "XDG_STATE_HOME=" + stateDir}
}

func TestDaytonaRunHappyPath(t *testing.T) {
	srv := startFakeDaytona(t)
	dir := t.TempDir()
	write(t, dir, "replay.jsonl", `{"task_id":"sort_list","completions":["def sort_list(xs):\n    out = []\n    for x in xs:\n        i = 0\n        while i < len(out) and out[i] <= x:\n            i += 1\n        out.insert(i, x)\n    return out\n","def sort_list(xs):\n    return sorted(xs)\n","def sort_list(xs) return"]}
{"task_id":"max_subarray","completions":["def max_subarray(xs):\n    best = cur = xs[0]\n    for x in xs[1:]:\n        cur = max(x, cur + x)\n        best = max(best, cur)\n    return best\n","def max_subarray(xs):\n    return 0\n","def max_subarray(xs):\n    raise ValueError()\n"]}
`)
	write(t, dir, "job.hcl", fmt.Sprintf(daytonaJob, 1, "20s", srv.URL, "20s"))
	env := daytonaEnv(t)
	r := rlhostEnv(t, dir, env, "run", "job.hcl", "--var", "backend=daytona")
	if r.code != 0 {
		t.Fatalf("run on daytona: %+v", r)
	}
	trajs := readTrajectories(t, filepath.Join(dir, "out", "trajectories.jsonl"))
	if len(trajs) != 6 {
		t.Fatalf("got %d trajectories, want 6", len(trajs))
	}
	rewards := map[string]float64{}
	for _, tr := range trajs {
		if tr.Error != "" {
			t.Errorf("%s/%d errored: %s", tr.TaskID, tr.Index, tr.Error)
		}
		rewards[fmt.Sprintf("%s/%d", tr.TaskID, tr.Index)] = tr.Reward
	}
	for k, w := range map[string]float64{"sort_list/0": 1, "sort_list/1": -1, "sort_list/2": -1, "max_subarray/0": 1, "max_subarray/2": -1} {
		if rewards[k] != w {
			t.Errorf("%s: reward %v, want %v", k, rewards[k], w)
		}
	}
	if srv.Creates() < 6 {
		t.Errorf("fake saw %d creates, want at least 6", srv.Creates())
	}
	if left := srv.Sandboxes(); len(left) != 0 {
		t.Errorf("%d sandboxes left on the fake Daytona after the run", len(left))
	}
}

func TestDaytonaInterruptLeavesNoSandboxes(t *testing.T) {
	srv := startFakeDaytona(t)
	dir := t.TempDir()
	write(t, dir, "replay.jsonl", sleepyReplay)
	write(t, dir, "job.hcl", fmt.Sprintf(daytonaJob, 5, "90s", srv.URL, "90s"))
	cmd, out, errb := startRun(t, dir, daytonaEnv(t), false, "run", "job.hcl", "--var", "backend=daytona")
	waitUntil(t, cmd, "sandboxes never got busy", func() bool { return len(srv.Sandboxes()) >= 6 }, out, errb)
	// Let the episodes reach their long-running programs.
	time.Sleep(2 * time.Second)
	cmd.Process.Signal(syscall.SIGINT)
	waitExit(t, cmd, 90*time.Second, errb)
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Errorf("exit code %d, want 130\n%s", code, errb.String())
	}
	if left := srv.Sandboxes(); len(left) != 0 {
		var ids []string
		for _, s := range left {
			ids = append(ids, fmt.Sprintf("%+v", s))
		}
		t.Errorf("sandboxes left on the fake Daytona after Ctrl-C:\n%s", strings.Join(ids, "\n"))
	}
	waitNoProcesses(t, rlhostBin)
}

// SIGKILL of the host: the backend plugin gets its parent-death SIGTERM and
// deletes its cloud sandboxes itself, without waiting for a next start.
func TestDaytonaHostKilledDeletesSandboxes(t *testing.T) {
	srv := startFakeDaytona(t)
	dir := t.TempDir()
	write(t, dir, "replay.jsonl", sleepyReplay)
	write(t, dir, "job.hcl", fmt.Sprintf(daytonaJob, 5, "90s", srv.URL, "90s"))
	cmd, out, errb := startRun(t, dir, daytonaEnv(t), false, "run", "job.hcl", "--var", "backend=daytona")
	waitUntil(t, cmd, "sandboxes never created", func() bool { return len(srv.Sandboxes()) >= 6 }, out, errb)
	time.Sleep(time.Second)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	deadline := time.Now().Add(45 * time.Second)
	for len(srv.Sandboxes()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d sandboxes still on the fake Daytona after the host was killed", len(srv.Sandboxes()))
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitNoProcesses(t, rlhostBin)
}
