package eval

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/host/output"
)

// ReportFile is the file `rlhost eval` writes its report to.
const ReportFile = "eval.json"

// TaskResult is one task's episodes under one policy.
type TaskResult struct {
	TaskID     string  `json:"task_id"`
	Episodes   int     `json:"episodes"`
	Passed     int     `json:"passed"`
	Errors     int     `json:"errors"`
	RewardMean float64 `json:"reward_mean"`
	RewardSD   float64 `json:"reward_sd"` // over the task's episodes (n-1)
	PassAt1    float64 `json:"pass_at_1"`
	PassAtK    float64 `json:"pass_at_k"`
}

// Result is one policy's evaluation.
type Result struct {
	Policy   string       `json:"policy"` // its label
	Source   string       `json:"source"` // what was evaluated: a block, a directory, a URL
	K        int          `json:"k"`
	Episodes int          `json:"episodes"`
	Errors   int          `json:"errors"`
	Tasks    []TaskResult `json:"tasks"`
	// RewardMean is the mean over tasks of each task's mean reward;
	// RewardCI its 95% interval (see Summarize). PassAt1 and PassAtK are
	// means over tasks too.
	RewardMean float64    `json:"reward_mean"`
	RewardCI   [2]float64 `json:"reward_ci95"`
	PassAt1    float64    `json:"pass_at_1"`
	PassAt1CI  [2]float64 `json:"pass_at_1_ci95"`
	PassAtK    float64    `json:"pass_at_k"`
	Seconds    float64    `json:"seconds"`
}

// Comparison is one policy's difference from the baseline (the first).
type Comparison struct {
	Baseline string `json:"baseline"`
	Policy   string `json:"policy"`
	Test     string `json:"test"`
	// Reward and PassAt1 are the policy's value minus the baseline's.
	Reward  Difference `json:"reward"`
	PassAt1 Difference `json:"pass_at_1"`
}

// Difference is a difference of means with its 95% interval and the
// two-sided p-value of "no difference".
type Difference struct {
	Diff        float64    `json:"diff"`
	CI          [2]float64 `json:"ci95"`
	P           float64    `json:"p"`
	Significant bool       `json:"significant"` // p < 0.05
}

// Report is what `rlhost eval` prints and writes to eval.json.
type Report struct {
	Job         string       `json:"job"`
	Env         string       `json:"env"`
	TaskSet     string       `json:"task_set"` // heldout | train | all
	Tasks       []string     `json:"tasks"`
	Samples     int          `json:"samples"` // episodes per task
	K           int          `json:"k"`
	Policies    []Result     `json:"policies"`
	Comparisons []Comparison `json:"comparisons,omitempty"`
	StartedAt   time.Time    `json:"started_at"`
}

// Summarize scores one policy's trajectories (as Runner.Episodes returns
// them: n per task, Group the task's index in tasks) with pass@1 and
// pass@k per task, averaged over tasks.
//
// The 95% intervals are those of a mean over these tasks, each task a
// stratum: the variance of the mean is Σ_t s_t²/n_t / T² (s_t the spread
// of task t's n_t episodes, T tasks), with Student's t at the
// Welch-Satterthwaite degrees of freedom. They say how far another run of
// the same evaluation could land, which is what a score on a fixed task
// set is compared by; they leave out how the score would change on other
// tasks (docs/eval.md).
func Summarize(label, source string, tasks []core.Task, trajs []core.Trajectory, k int, took time.Duration) Result {
	res := Result{Policy: label, Source: source, K: k, Seconds: took.Seconds()}
	per := make([]TaskResult, len(tasks))
	rewards := make([][]float64, len(tasks))
	for i, t := range tasks {
		per[i].TaskID = t.ID
	}
	for _, t := range trajs {
		if t.Group < 0 || t.Group >= len(tasks) {
			continue
		}
		tr := &per[t.Group]
		tr.Episodes++
		if output.Passed(t) {
			tr.Passed++
		}
		if t.Error != "" {
			tr.Errors++
			res.Errors++
		}
		rewards[t.Group] = append(rewards[t.Group], t.Reward)
		res.Episodes++
	}
	var n int
	for i := range per {
		tr := &per[i]
		if tr.Episodes == 0 {
			continue
		}
		tr.RewardMean, tr.RewardSD = meanSD(rewards[i])
		tr.PassAt1 = PassAtK(tr.Episodes, tr.Passed, 1)
		tr.PassAtK = PassAtK(tr.Episodes, tr.Passed, min(k, tr.Episodes))
		res.PassAtK += tr.PassAtK
		n++
	}
	res.Tasks = per
	if n == 0 {
		return res
	}
	res.PassAtK /= float64(n)
	r, p := strata(per)
	res.RewardMean, res.RewardCI = r.ci()
	res.PassAt1, res.PassAt1CI = p.ci()
	return res
}

// stratum is one task's mean and the variance of that mean.
type stratum struct {
	mean, v float64
	n       int
}

// strata returns the per-task strata of the reward and of passing.
func strata(tasks []TaskResult) (reward, pass estimate) {
	for _, t := range tasks {
		if t.Episodes == 0 {
			continue
		}
		n := float64(t.Episodes)
		p := t.PassAt1
		vp := 0.0
		if t.Episodes > 1 {
			vp = p * (1 - p) / (n - 1) // the unbiased variance of a 0/1 mean
		}
		reward = append(reward, stratum{t.RewardMean, t.RewardSD * t.RewardSD / n, t.Episodes})
		pass = append(pass, stratum{p, vp, t.Episodes})
	}
	return reward, pass
}

// estimate is a mean over strata (tasks), each weighted equally.
type estimate []stratum

// stats returns the mean over the strata, its standard error and the
// Welch-Satterthwaite degrees of freedom (+Inf when the error is 0).
func (e estimate) stats() (mean, se, df float64) {
	var v, vv float64
	for _, s := range e {
		mean += s.mean
		v += s.v
		if s.n > 1 {
			vv += s.v * s.v / float64(s.n-1)
		}
	}
	T := float64(len(e))
	mean /= T
	se = math.Sqrt(v) / T
	df = math.Inf(1)
	if vv > 0 {
		df = v * v / vv
	}
	return mean, se, df
}

func (e estimate) ci() (float64, [2]float64) {
	m, se, df := e.stats()
	h := 0.0
	if se > 0 {
		h = tQuantile(0.975, df) * se
	}
	return m, [2]float64{m - h, m + h}
}

// Compare tests each policy's difference from the first.
//
// Both ran the same tasks, so the difference is taken task by task and
// averaged, and its variance is the sum of both sides' per-task
// variances over T²: Welch's two-sample t test, stratified by task. Taking
// differences within a task keeps the tasks' unequal difficulty out of the
// test, and the test works from a single task up.
func Compare(base, other Result) Comparison {
	c := Comparison{Baseline: base.Policy, Policy: other.Policy}
	br, bp := strata(base.Tasks)
	or, op := strata(other.Tasks)
	c.Test = fmt.Sprintf("Welch t stratified by task, %d tasks", min(len(br), len(or)))
	c.Reward, c.PassAt1 = difference(br, or), difference(bp, op)
	return c
}

// difference is mean(b) - mean(a) over paired strata, with Welch's t.
func difference(a, b estimate) Difference {
	if len(a) != len(b) || len(a) == 0 {
		return Difference{P: 1}
	}
	d := make(estimate, len(a))
	var vv float64
	for i := range a {
		d[i] = stratum{mean: b[i].mean - a[i].mean, v: a[i].v + b[i].v}
		if a[i].n > 1 {
			vv += a[i].v * a[i].v / float64(a[i].n-1)
		}
		if b[i].n > 1 {
			vv += b[i].v * b[i].v / float64(b[i].n-1)
		}
	}
	m, se, _ := d.stats()
	var v float64
	for _, s := range d {
		v += s.v
	}
	df := math.Inf(1)
	if vv > 0 {
		df = v * v / vv
	}
	out := Difference{Diff: m, CI: [2]float64{m, m}}
	if se > 0 {
		h := tQuantile(0.975, df) * se
		out.CI = [2]float64{m - h, m + h}
	}
	out.P = tTest(m, se, df)
	out.Significant = out.P < 0.05
	return out
}

// Write writes the report as indented JSON to dir/eval.json.
func (r *Report) Write(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("eval report: %w", err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", fmt.Errorf("eval report: %w", err)
	}
	path := filepath.Join(dir, ReportFile)
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("eval report: %w", err)
	}
	return path, nil
}

// Render prints one policy's result: the headline figures and the
// per-task table.
func (r Result) Render(w io.Writer) {
	fmt.Fprintf(w, "policy %s (%s): %d tasks x %d episodes, %.1fs\n", r.Policy, r.Source, len(r.Tasks), r.Episodes/max(1, len(r.Tasks)), r.Seconds)
	fmt.Fprintf(w, "  reward %.3f [%.3f, %.3f]  pass@1 %.1f%%  pass@%d %.1f%%  errors %d\n",
		r.RewardMean, r.RewardCI[0], r.RewardCI[1], 100*r.PassAt1, r.K, 100*r.PassAtK, r.Errors)
	width := len("task")
	for _, t := range r.Tasks {
		width = max(width, len(t.TaskID))
	}
	kcol := fmt.Sprintf("pass@%d", r.K)
	fmt.Fprintf(w, "  %-*s  %7s  %7s  %7s  %s\n", width, "task", "reward", "pass@1", kcol, "errors")
	for _, t := range r.Tasks {
		fmt.Fprintf(w, "  %-*s  %7.3f  %6.1f%%  %6.1f%%  %d\n", width, t.TaskID, t.RewardMean, 100*t.PassAt1, 100*t.PassAtK, t.Errors)
	}
}

// Render prints the comparison in one line per measure.
func (c Comparison) Render(w io.Writer) {
	line := func(name string, d Difference, scale float64, format string) string {
		verdict := "not significant"
		if d.Significant {
			verdict = "significant"
		}
		return fmt.Sprintf("  %-7s "+format+"  p = %.2g, %s at 5%%", name,
			scale*d.Diff, scale*d.CI[0], scale*d.CI[1], d.P, verdict)
	}
	fmt.Fprintf(w, "%s vs %s (%s):\n%s\n%s\n", c.Policy, c.Baseline, c.Test,
		line("reward", c.Reward, 1, "%+.3f [%+.3f, %+.3f]"), line("pass@1", c.PassAt1, 100, "%+.1f pts [%+.1f, %+.1f]"))
}

// Figures are the eval/* figures a training run logs for one evaluation.
func (r Result) Figures() output.Evaluation {
	return output.Evaluation{RewardMean: r.RewardMean, RewardLow: r.RewardCI[0], RewardHigh: r.RewardCI[1],
		PassAt1: r.PassAt1, PassAtK: r.PassAtK, K: float64(r.K), Tasks: float64(len(r.Tasks)),
		Episodes: float64(r.Episodes), Errors: float64(r.Errors), Seconds: r.Seconds}
}

// TaskIDs lists the ids of tasks.
func TaskIDs(tasks []core.Task) []string {
	out := make([]string, len(tasks))
	for i, t := range tasks {
		out[i] = t.ID
	}
	return out
}
