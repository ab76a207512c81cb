package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
)

// Off-policy training end to end: rollouts run ahead of the trainer by up
// to max_off_policy_steps, every turn says which weights sampled it, and
// no trained token is older than the limit.

// versionsAtTraining is, for each step of a run's metrics, the version of
// the weights the trainer held when it trained that step: the updates
// applied before it.
func versionsAtTraining(t *testing.T, lines []stepLine) map[int]int {
	t.Helper()
	at, v := map[int]int{}, 0
	for _, l := range lines {
		at[l.Step] = v
		if l.Extra["train/updates"] > 0 {
			v++
		}
	}
	return at
}

// checkAges checks from the trajectories that no turn of a trained step
// was sampled by weights more than limit updates older than the trainer's
// at that step, and returns how many turns were sampled by older weights
// than those (at least one, or rollouts never ran ahead).
func checkAges(t *testing.T, out string, limit int) (stale int) {
	t.Helper()
	lines := readStepLines(t, filepath.Join(out, "metrics.jsonl"))
	at := versionsAtTraining(t, lines)
	for _, tr := range readTrajectories(t, filepath.Join(out, "trajectories.jsonl")) {
		v, trained := at[tr.Step]
		if !trained || tr.FinishReason == core.FinishCancelled {
			continue
		}
		for _, turn := range tr.Turns {
			if len(turn.TokenIDs) == 0 {
				continue
			}
			if turn.WeightsVersion == nil {
				t.Fatalf("step %d turn %d records no weights version", tr.Step, turn.Index)
			}
			age := v - *turn.WeightsVersion
			if age < 0 || age > limit {
				t.Errorf("step %d (trained at version %d) has a turn sampled by version %d", tr.Step, v, *turn.WeightsVersion)
			}
			if age > 0 {
				stale++
			}
		}
	}
	for _, l := range lines {
		if l.Extra["async/dropped_stale"] != 0 || l.Extra["async/staleness_max"] > float64(limit) {
			t.Errorf("step %d: %v episodes dropped, oldest %v updates", l.Step, l.Extra["async/dropped_stale"], l.Extra["async/staleness_max"])
		}
	}
	return stale
}

// The training job of TestTrainingRaisesReward with rollouts one step
// ahead still learns.
func TestAsyncTrainingLearns(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model")
	}
	dir := t.TempDir()
	trainingJob(t, dir, 12, 6, 8, 80)
	job := filepath.Join(dir, "job.hcl")
	b, _ := os.ReadFile(job)
	write(t, dir, "job.hcl", strings.Replace(string(b), "  concurrency = 8\n", "  concurrency = 8\n  max_off_policy_steps = 1\n", 1))
	r := rlhost(t, dir, "run", "job.hcl")
	if r.code != 0 {
		t.Fatalf("run failed: %+v", r)
	}
	out := filepath.Join(dir, "out")
	steps := readStepLines(t, filepath.Join(out, "metrics.jsonl"))
	if len(steps) != 12 {
		t.Fatalf("%d metrics lines, want 12", len(steps))
	}
	first, last := medianReward(steps[:3]), medianReward(steps[9:])
	t.Logf("reward first 3 steps %.3f, last 3 steps %.3f (medians)", first, last)
	if last < first+0.2 {
		t.Errorf("reward did not rise: first 3 steps %.3f, last 3 %.3f\n%s", first, last, r.stdout)
	}
	if stale := checkAges(t, out, 1); stale == 0 {
		t.Error("no turn was sampled by weights older than the trainer's: the rollouts never ran ahead")
	}
	// The correction for off-policy tokens is on by default.
	for _, l := range steps {
		if l.Extra["train/updates"] > 0 {
			if _, ok := l.Extra["train/sample_ratio_mean"]; !ok {
				t.Errorf("step %d records no importance ratio", l.Step)
			}
		}
	}
}

func medianReward(ss []stepLine) float64 {
	v := []float64{ss[0].RewardMean, ss[1].RewardMean, ss[2].RewardMean}
	for i := range v {
		for j := i + 1; j < len(v); j++ {
			if v[j] < v[i] {
				v[i], v[j] = v[j], v[i]
			}
		}
	}
	return v[1]
}

// Two `rlhost model serve` processes share a vllm policy's requests
// (weights_sync = "lora", rollouts one step ahead); one is killed mid-run.
// No episode is lost, the run finishes on the other, and every adapter
// the trainer pushed after the kill reached the survivor.
func TestFleetSurvivesAKilledServer(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model against two servers")
	}
	dir := t.TempDir()
	model := warmedModel(t, dir)
	a, procA := modelServerProc(t, model, "base", true)
	b := modelServer(t, model, "base", true)
	const steps, batch = 6, 2
	vllmJobRun(t, dir, "vfleet", fmt.Sprintf("[%q, %q]", a, b), "base", model, steps, batch, riseLR, "", `backoff_base = "10ms"`, riseTrainer)
	cmd := exec.Command(rlhostBin, "run", "vllm.hcl")
	cmd.Dir = dir
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	metrics := filepath.Join(dir, "vfleet", "metrics.jsonl")
	deadline := time.After(4 * time.Minute)
wait:
	for {
		select {
		case err := <-done:
			t.Fatalf("run ended before the kill: %v\n%s\n%s", err, stdout.String(), stderr.String())
		case <-deadline:
			_ = cmd.Process.Kill()
			t.Fatal("no step finished")
		case <-time.After(20 * time.Millisecond):
			if b, err := os.ReadFile(metrics); err == nil && strings.Count(string(b), "\n") >= 2 {
				break wait
			}
		}
	}
	_ = syscall.Kill(-procA.Process.Pid, syscall.SIGKILL)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run failed after a server was killed: %v\n%s\n%s", err, stdout.String(), stderr.String())
		}
	case <-time.After(4 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("run did not finish after a server was killed")
	}
	out := filepath.Join(dir, "vfleet")
	trajs := readTrajectories(t, filepath.Join(out, "trajectories.jsonl"))
	if len(trajs) != steps*batch*8 {
		t.Errorf("%d episodes recorded, want %d", len(trajs), steps*batch*8)
	}
	for _, tr := range trajs {
		if tr.Error != "" || tr.FinishReason == core.FinishCancelled {
			t.Errorf("step %d episode %d/%d lost: %s %s", tr.Step, tr.Group, tr.Index, tr.FinishReason, tr.Error)
		}
	}
	if len(readStepLines(t, metrics)) != steps {
		t.Errorf("not every step finished")
	}
	checkAges(t, out, 1)
	if !strings.Contains(stderr.String(), "server "+a+" is out") {
		t.Errorf("stderr does not say the killed server is out:\n%s", stderr.String())
	}
}

// Ctrl-C in an off-policy run, then --resume: every episode of the run is
// on disk exactly once (none lost, none run twice), every step is trained
// once, and the finished episodes of steps the trainer had not reached
// were used, not run again.
func TestAsyncResumeLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model")
	}
	dir := t.TempDir()
	const steps = 8
	trainingJob(t, dir, steps, 0, 8, 40)
	job := filepath.Join(dir, "job.hcl")
	b, _ := os.ReadFile(job)
	write(t, dir, "job.hcl", strings.Replace(string(b), "  concurrency = 8\n", "  concurrency = 8\n  max_off_policy_steps = 2\n", 1))
	cmd := exec.Command(rlhostBin, "run", "job.hcl")
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	metrics := filepath.Join(dir, "out", "metrics.jsonl")
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if b, err := os.ReadFile(metrics); err == nil && strings.Count(string(b), "\n") >= 3 {
			break
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			t.Fatal("no step finished")
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
	if err := cmd.Wait(); err == nil || cmd.ProcessState.ExitCode() != 130 {
		t.Fatalf("exit %v, want 130\n%s", err, stderr.String())
	}
	if strings.Contains(stderr.String(), "[ERROR]") {
		t.Errorf("a clean Ctrl-C logged an error:\n%s", stderr.String())
	}
	before := readTrajectories(t, filepath.Join(dir, "out", "trajectories.jsonl"))
	r := rlhost(t, dir, "run", "job.hcl", "--resume", "out")
	if r.code != 0 {
		t.Fatalf("resume failed: %+v", r)
	}
	lines := readStepLines(t, metrics)
	if len(lines) != steps {
		t.Fatalf("%d metrics lines after resume, want %d", len(lines), steps)
	}
	for i, l := range lines {
		if l.Step != i || l.Extra["interrupted"] != 0 {
			t.Errorf("metrics line %d: step %d, interrupted %v", i, l.Step, l.Extra["interrupted"])
		}
	}
	seen := map[string]int{}
	after := map[string]core.Trajectory{}
	for _, tr := range readTrajectories(t, filepath.Join(dir, "out", "trajectories.jsonl")) {
		if tr.FinishReason == core.FinishCancelled {
			t.Errorf("a cancelled episode is still on disk: step %d %d/%d", tr.Step, tr.Group, tr.Index)
		}
		k := fmt.Sprintf("%d/%d/%d", tr.Step, tr.Group, tr.Index)
		seen[k]++
		after[k] = tr
	}
	if len(seen) != steps*4*8 {
		t.Errorf("%d distinct episodes on disk, want %d", len(seen), steps*4*8)
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("episode %s is on disk %d times", k, n)
		}
	}
	// Every episode the first process finished is still there as it was:
	// used, not run again (a second run would start at another time).
	kept := 0
	for _, tr := range before {
		if tr.FinishReason == core.FinishCancelled {
			continue
		}
		k := fmt.Sprintf("%d/%d/%d", tr.Step, tr.Group, tr.Index)
		if a, ok := after[k]; !ok || !a.StartedAt.Equal(tr.StartedAt) {
			t.Errorf("episode %s of the first process was lost or run again", k)
		}
		kept++
	}
	t.Logf("the first process finished %d episodes; all are in the resumed run's files", kept)
	checkAges(t, filepath.Join(dir, "out"), 2)
}
