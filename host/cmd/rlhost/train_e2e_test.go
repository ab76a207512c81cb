package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/trainer/chat"
	"github.com/rlhost/rlhost/trainer/tokenizer"
)

// trainingJob writes a one-task training job into dir: "return x plus 1",
// a tokenizer and warm-up transcripts in four styles of which only one
// passes the tests. Warmed up, the model answers in every style; GRPO must
// find the one the sandbox pays for.
func trainingJob(t *testing.T, dir string, steps, checkpointEvery, concurrency, warmupSteps int) {
	t.Helper()
	const system = "Answer with Python code only."
	const prompt = "Write f(x) that returns x plus 1."
	styles := []string{
		"def f(x):\n    return x + 1",
		"def f(x):\n    print(x + 1)",
		"def f(x):\n    return \"x + 1\"",
		"def f(x):\n    return str(x + 1)",
	}
	var warm, corpus []string
	for i := range 64 {
		msgs := []core.Message{{Role: core.RoleSystem, Content: system}, {Role: core.RoleUser, Content: prompt},
			{Role: core.RoleAssistant, Content: styles[i%len(styles)]}}
		b, _ := json.Marshal(map[string]any{"messages": msgs})
		warm = append(warm, string(b))
		text, err := chat.Render(msgs, nil, false)
		if err != nil {
			t.Fatal(err)
		}
		corpus = append(corpus, text)
	}
	tok, err := tokenizer.Train(corpus, 320, tokenizer.ChatMLSpecials)
	if err != nil {
		t.Fatal(err)
	}
	write(t, dir, "tokenizer.json", string(tok))
	write(t, dir, "warmup.jsonl", strings.Join(warm, "\n")+"\n")
	write(t, dir, "tasks.jsonl", `{"id": "plus_1", "prompt": "`+prompt+`", "func_name": "f", "tests": ["0", "1", "5", "-3"], "reference": "def f(x):\n    return x + 1\n"}`+"\n")
	write(t, dir, "job.hcl", fmt.Sprintf(`
run {
  name        = "train"
  steps       = %d
  batch_size  = 4
  group_size  = 8
  seed        = 7
  concurrency = %d
}
sandbox "local" {
  backend = "local"
  timeout = "5s"
}
env "coding" {
  sandbox       = sandbox.local
  tasks         = "tasks.jsonl"
  system_prompt = "%s"
  timeout       = "2s"
}
policy "student" {
  provider    = "embedded"
  init        = "1m"
  tokenizer   = "tokenizer.json"
  init_seed   = 3
  temperature = 1.0
  max_tokens  = 16
}
trainer {
  # At 0.001, once most groups passed, a step driven by their few failures
  # could tip this tiny model into never ending its answer: every reward
  # -1, and no group left to learn from (3 runs of about 30, one on CI).
  # At 0.0005 the reward of the last steps rose more, not less (by 0.69 to
  # 0.91 over the first steps in 8 runs, against 0.34 to 0.97 in 10).
  learning_rate    = 0.0005
  warmup_steps     = 2
  micro_batch      = 16
  max_seq_len      = 64
  checkpoint_every = %d
  keep_checkpoints = 10
  warmup {
    file          = "warmup.jsonl"
    steps         = %d
    batch_size    = 16
    learning_rate = 0.003
  }
}
output { dir = "out" }
`, steps, concurrency, system, checkpointEvery, warmupSteps))
}

type stepLine struct {
	Step       int                `json:"step"`
	RewardMean float64            `json:"reward_mean"`
	PassRate   float64            `json:"pass_rate"`
	Extra      map[string]float64 `json:"extra"`
}

func readStepLines(t *testing.T, path string) []stepLine {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []stepLine
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var s stepLine
		if err := json.Unmarshal([]byte(l), &s); err != nil {
			t.Fatalf("bad metrics line %q: %v", l, err)
		}
		out = append(out, s)
	}
	return out
}

// The whole loop on a tiny model: rollouts from the embedded server,
// rewards from running the code in local sandboxes, GRPO updates between
// steps. The reward must rise, and the run leaves a loadable model.
func TestTrainingRaisesReward(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model for a few steps")
	}
	dir := t.TempDir()
	trainingJob(t, dir, 12, 6, 8, 80)
	r := rlhost(t, dir, "run", "job.hcl")
	if r.code != 0 {
		t.Fatalf("run failed: %+v", r)
	}
	steps := readStepLines(t, filepath.Join(dir, "out", "metrics.jsonl"))
	if len(steps) != 12 {
		t.Fatalf("%d metrics lines, want 12", len(steps))
	}
	// The median of three steps: one step of a stochastic run can swing
	// far either way (one collapsed to -0.69 between two at 0.7 in a
	// loaded run) without saying anything about whether training works.
	median := func(ss []stepLine) float64 {
		v := []float64{ss[0].RewardMean, ss[1].RewardMean, ss[2].RewardMean}
		sort.Float64s(v)
		return v[1]
	}
	first, last := median(steps[:3]), median(steps[9:])
	t.Logf("reward first 3 steps %.3f, last 3 steps %.3f (medians)", first, last)
	if last < first+0.2 {
		t.Errorf("reward did not rise: first 3 steps %.3f, last 3 %.3f\n%s", first, last, r.stdout)
	}
	trained := 0
	for _, s := range steps {
		if _, ok := s.Extra["time/generation_s"]; !ok {
			t.Errorf("step %d metrics lack time/generation_s", s.Step)
		}
		if s.Extra["train/skipped_update"] == 1 {
			// A step whose every group got equal rewards has no gradient
			// and is skipped on purpose; nothing else may skip here.
			if g := s.Extra["train/groups"]; g == 0 || s.Extra["train/zero_std_groups"] != g {
				t.Errorf("step %d skipped its update with varied rewards: %v", s.Step, s.Extra)
			}
			continue
		}
		trained++
		for _, k := range []string{"train/loss", "train/grad_norm", "train/lr", "train/tokens", "time/train_s"} {
			if _, ok := s.Extra[k]; !ok {
				t.Errorf("step %d metrics lack %s", s.Step, k)
			}
		}
	}
	if trained < len(steps)/2 {
		t.Errorf("only %d of %d steps trained", trained, len(steps))
	}
	for _, p := range []string{"final/config.json", "final/model.safetensors", "final/tokenizer.json", "rewards.png", "checkpoints/step-000012/run_state.json"} {
		if _, err := os.Stat(filepath.Join(dir, "out", p)); err != nil {
			t.Errorf("missing %s: %v", p, err)
		}
	}
	// The trained model loads back and scores.
	if r := rlhost(t, dir, "model", "score", "--model", filepath.Join(dir, "out", "final"), "--token-ids", "1,2,3", "--json"); r.code != 0 {
		t.Errorf("model score on the final model: %+v", r)
	}
	// Offline training on the recorded groups uses the same sampled ids.
	r = rlhost(t, dir, "train", "job.hcl", "--trajectories", filepath.Join(dir, "out", "trajectories.jsonl"), "--out", "offline")
	if r.code != 0 {
		t.Fatalf("offline train failed: %+v", r)
	}
	// It starts from the warmed-up model the episodes were sampled from,
	// so its log-probs agree with the server's.
	if strings.Contains(r.stderr, "drift") {
		t.Errorf("offline training warns of log-prob drift:\n%s", r.stderr)
	}
	off := readStepLines(t, filepath.Join(dir, "offline", "metrics.jsonl"))
	offTrained := 0
	for _, s := range off {
		if s.Extra["train/tokens"] > 0 {
			offTrained++
		}
	}
	if len(off) != 12 || offTrained != trained {
		t.Errorf("offline training wrote %d steps, %d trained (online %d): %+v", len(off), offTrained, trained, off)
	}
	waitNoProcesses(t, rlhostBin)
}

// A run killed outright after a checkpoint and resumed writes the same
// metrics as one that ran straight through.
func TestResumeMatchesUninterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model twice")
	}
	straight := t.TempDir()
	trainingJob(t, straight, 4, 1, 1, 10)
	if r := rlhost(t, straight, "run", "job.hcl"); r.code != 0 {
		t.Fatalf("straight run failed: %+v", r)
	}
	want := readStepLines(t, filepath.Join(straight, "out", "metrics.jsonl"))

	dir := t.TempDir()
	trainingJob(t, dir, 4, 1, 1, 10)
	cmd := exec.Command(rlhostBin, "run", "job.hcl")
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, "out", "checkpoints", "step-000002", "run_state.json")
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if _, err := os.Stat(marker); err == nil {
			break
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			t.Fatal("no checkpoint after step 2")
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Wait()
	r := rlhost(t, dir, "run", "job.hcl", "--resume", "out")
	if r.code != 0 {
		t.Fatalf("resume failed: %+v", r)
	}
	got := readStepLines(t, filepath.Join(dir, "out", "metrics.jsonl"))
	if len(got) != len(want) {
		t.Fatalf("resumed run has %d steps, straight run %d", len(got), len(want))
	}
	same := func(a, b float64) bool { return a == b || math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(a)) }
	for i := range want {
		w, g := want[i], got[i]
		if w.Step != g.Step || !same(w.RewardMean, g.RewardMean) || !same(w.PassRate, g.PassRate) {
			t.Errorf("step %d: resumed reward %v pass %v, straight %v %v", i, g.RewardMean, g.PassRate, w.RewardMean, w.PassRate)
		}
		for _, k := range []string{"train/loss", "train/grad_norm", "train/tokens", "train/lr"} {
			if !same(w.Extra[k], g.Extra[k]) {
				t.Errorf("step %d %s: resumed %v, straight %v", i, k, g.Extra[k], w.Extra[k])
			}
		}
	}
	waitNoProcesses(t, rlhostBin)
}

// Ctrl-C during a training run writes a checkpoint of the last finished
// step and exits 130; --resume then finishes the run.
func TestTrainingInterruptCheckpoints(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model")
	}
	dir := t.TempDir()
	trainingJob(t, dir, 6, 0, 2, 5)
	cmd := exec.Command(rlhostBin, "run", "job.hcl")
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var errb strings.Builder
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	metrics := filepath.Join(dir, "out", "metrics.jsonl")
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if b, err := os.ReadFile(metrics); err == nil && strings.Count(string(b), "\n") >= 1 {
			break
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			t.Fatal("no step finished")
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
		t.Fatalf("exit %v, want 130\n%s", err, errb.String())
	}
	if !strings.Contains(errb.String(), "--resume out") {
		t.Errorf("stderr does not say how to resume:\n%s", errb.String())
	}
	// A clean interrupt is not an error: the plugins' sockets closing
	// under them is part of it.
	if strings.Contains(errb.String(), "[ERROR]") {
		t.Errorf("a clean Ctrl-C logged an error:\n%s", errb.String())
	}
	ckpts, _ := filepath.Glob(filepath.Join(dir, "out", "checkpoints", "step-*", "run_state.json"))
	if len(ckpts) != 1 {
		t.Fatalf("checkpoints after Ctrl-C: %v", ckpts)
	}
	r := rlhost(t, dir, "run", "job.hcl", "--resume", "out")
	if r.code != 0 {
		t.Fatalf("resume failed: %+v", r)
	}
	got := readStepLines(t, metrics)
	if len(got) != 6 {
		t.Errorf("%d steps after resume, want 6", len(got))
	}
	// The summary, printed and on disk, is of the whole run.
	var sum struct {
		StepsDone int       `json:"steps_done"`
		Episodes  int       `json:"episodes"`
		StartedAt time.Time `json:"started_at"`
		ResumedAt time.Time `json:"resumed_at"`
	}
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(dir, "out", "summary.json"))), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.StepsDone != 6 || sum.Episodes != 6*32 || !sum.StartedAt.Before(sum.ResumedAt) {
		t.Errorf("summary.json after the resume: %+v; want 6 steps, %d episodes, started before resumed", sum, 6*32)
	}
	if !strings.Contains(r.stdout, "steps     6/6") || !strings.Contains(r.stdout, "resumed at ") {
		t.Errorf("final summary is not of the whole run:\n%s", r.stdout)
	}
	// The resume names the step it goes on at as the step lines do.
	if m := regexp.MustCompile(`steps 0 to (\d+) done, continuing at step (\d+)`).FindStringSubmatch(r.stdout); m == nil ||
		!strings.Contains(r.stdout, fmt.Sprintf("\nstep %s (", m[2])) {
		t.Errorf("the resume's step does not match the first step line:\n%s", r.stdout)
	}
	waitNoProcesses(t, rlhostBin)
}
