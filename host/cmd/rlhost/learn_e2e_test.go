package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/host/eval"
)

// exampleJob writes job.hcl into a fresh directory beside a link to the
// example's data directory: the example's own job file with extra appended.
func exampleJob(t *testing.T, name, extra string) string {
	t.Helper()
	dir := t.TempDir()
	examples, err := filepath.Abs("../../../examples")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(examples, name), filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(examples, name+".hcl"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, dir, "job.hcl", string(src)+extra)
	return dir
}

func meanReward(steps []stepLine) float64 {
	var s float64
	for _, l := range steps {
		s += l.RewardMean
	}
	return s / float64(len(steps))
}

// The quickstart with two of its six tasks held out of training: the run
// never samples them, evaluates them every 20 steps (eval/* metrics and an
// eval: line), and `rlhost eval` finds its final model better on them than
// the model its warm-up made. GRPO never saw those tasks; the answer style
// it taught on the other four carries over.
func TestQuickstartEvalHeldOut(t *testing.T) {
	if testing.Short() {
		t.Skip("trains the quickstart")
	}
	held := []string{"negated", "cubed"}
	dir := exampleJob(t, "quickstart", `
eval {
  holdout = ["negated", "cubed"]
  every   = 20
  samples = 8
}
`)
	r := rlhostWithin(t, 12*time.Minute, dir, nil, "run", "job.hcl", "--out", "out")
	if r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	if !strings.Contains(r.stdout, "held out of training: 2 tasks (negated, cubed)") || !strings.Contains(r.stdout, "  eval: reward ") {
		t.Errorf("the run does not say what it held out or what it evaluated:\n%s", r.stdout)
	}
	for _, tr := range readTrajectories(t, filepath.Join(dir, "out", "trajectories.jsonl")) {
		if slices.Contains(held, tr.TaskID) {
			t.Fatalf("step %d trained on held-out task %s", tr.Step, tr.TaskID)
		}
	}
	steps := readStepLines(t, filepath.Join(dir, "out", "metrics.jsonl"))
	for _, s := range steps {
		_, has := s.Extra["eval/reward_mean"]
		if due := (s.Step+1)%20 == 0; has != due || (due && s.Extra["eval/tasks"] != 2) {
			t.Errorf("step %d: eval metrics present %v (%v), want them every 20 steps", s.Step, has, s.Extra["eval/tasks"])
		}
	}

	r = rlhost(t, dir, "eval", "job.hcl", "--policy", "warmup=out/warmup", "--policy", "final=out", "--out", "out")
	if r.code != 0 {
		t.Fatalf("eval: %+v", r)
	}
	var rep eval.Report
	data, err := os.ReadFile(filepath.Join(dir, "out", eval.ReportFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Tasks, held) || rep.TaskSet != "heldout" || len(rep.Policies) != 2 || len(rep.Comparisons) != 1 {
		t.Fatalf("report: tasks %v (%s), %d policies, %d comparisons", rep.Tasks, rep.TaskSet, len(rep.Policies), len(rep.Comparisons))
	}
	warm, final := rep.Policies[0], rep.Policies[1]
	t.Logf("held-out reward: warm-up %.3f %v, final %.3f %v; %s: %+v", warm.RewardMean, warm.RewardCI,
		final.RewardMean, final.RewardCI, rep.Comparisons[0].Test, rep.Comparisons[0].Reward)
	if final.RewardMean <= warm.RewardMean || final.PassAt1 <= warm.PassAt1 {
		t.Errorf("the final model (reward %.3f, pass@1 %.3f) does not beat the warm-up's (%.3f, %.3f) on the held-out tasks\n%s",
			final.RewardMean, final.PassAt1, warm.RewardMean, warm.PassAt1, r.stdout)
	}
	for _, want := range []string{"policy warmup (model out/warmup): 2 tasks x 8 episodes", "final vs warmup (Welch t stratified by task, 2 tasks):", "report: out/eval.json"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("eval output lacks %q:\n%s", want, r.stdout)
		}
	}
}

// The first hour of rlhost eval: --help, mistyped flags and policies that
// name nothing each say what is wrong, with the CLI's exit codes.
func TestEvalCommandErrors(t *testing.T) {
	dir := exampleJob(t, "quickstart", "")
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{[]string{"eval", "--help"}, 0, "Usage: rlhost eval FILE.hcl", ""},
		{[]string{"eval", "job.hcl", "--polcy", "x"}, 2, "", "--polcy"},
		{[]string{"eval", "job.hcl", "--policy", "studnt"}, 2, "", `did you mean the policy block "student"?`},
		{[]string{"eval", "job.hcl", "--policy", "nowhere/model"}, 2, "", `neither a policy block`},
		{[]string{"eval", "job.hcl", "--tasks", "heldout"}, 1, "", "holds no tasks out"},
		{[]string{"eval", "job.hcl", "-k", "4", "--samples", "2"}, 2, "", "--samples 2 is fewer than -k 4"},
		{[]string{"eval", "job.hcl", "--policy", "http://127.0.0.1:9/v1"}, 2, "", "name the model it serves with --model"},
	} {
		r := rlhost(t, dir, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stdout, tc.stdout) || !strings.Contains(r.stderr, tc.stderr) {
			t.Errorf("rlhost %s: exit %d, stdout %q, stderr %q; want exit %d with %q / %q",
				strings.Join(tc.args, " "), r.code, r.stdout, r.stderr, tc.code, tc.stdout, tc.stderr)
		}
	}
}

// The multi-turn quickstart learns on the CPU (shortened to 20 steps): the
// reward of its last steps beats its first, the passing episodes read spec.txt with a tool
// call before writing solution.py in the same sandbox, and the update
// trains on the sampled tokens only (the tool results the env wrote are in
// the sequences but not in the loss).
func TestQuickstartToolsLearns(t *testing.T) {
	if testing.Short() {
		t.Skip("trains the multi-turn quickstart")
	}
	dir := exampleJob(t, "quickstart-tools", "")
	// 20 of the job's 30 steps: the reward has risen by then, and CI's
	// time is shared.
	r := rlhostWithin(t, 15*time.Minute, dir, nil, "run", "job.hcl", "--out", "out", "--steps", "20")
	if r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	steps := readStepLines(t, filepath.Join(dir, "out", "metrics.jsonl"))
	first, last := meanReward(steps[:5]), meanReward(steps[len(steps)-5:])
	t.Logf("mean reward, first 5 steps %.3f, last 5 %.3f", first, last)
	if last < first+0.25 {
		t.Errorf("the reward did not rise: first 5 steps %.3f, last 5 %.3f\n%s", first, last, r.stdout)
	}
	for _, s := range steps {
		if s.Extra["train/updates"] == 1 && !(s.Extra["train/tokens"] > 0 && s.Extra["train/tokens"] <= s.Extra["completion_tokens"]) {
			t.Errorf("step %d trained on %v tokens, but its episodes sampled %v: the env's tokens were trained on",
				s.Step, s.Extra["train/tokens"], s.Extra["completion_tokens"])
		}
	}
	read, passed := 0, 0
	for _, tr := range readTrajectories(t, filepath.Join(dir, "out", "trajectories.jsonl")) {
		if tr.Step < len(steps)-5 || tr.Reward != 1 {
			continue
		}
		passed++
		if calls := toolCalls(tr); len(calls) >= 2 && calls[0] == "read_file" && calls[1] == "write_file" {
			read++
		}
	}
	if passed == 0 || float64(read) < 0.8*float64(passed) {
		t.Errorf("of %d passing episodes in the last steps, %d read spec.txt before writing", passed, read)
	}
}

// toolCalls lists the tools an episode called, in order.
func toolCalls(tr core.Trajectory) []string {
	var out []string
	for _, m := range tr.Messages {
		for _, c := range m.ToolCalls {
			out = append(out, c.Function.Name)
		}
	}
	return out
}
