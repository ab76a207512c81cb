package training

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/host/output"
	"github.com/rlhost/rlhost/host/runner"
	"github.com/rlhost/rlhost/trainer/grpo"
	"github.com/rlhost/rlhost/trainer/safetensors"
)

// Files and directories a training run adds to the output directory.
const (
	CheckpointsDir = "checkpoints"
	FinalDir       = "final"
	AdapterDir     = "adapter" // the LoRA adapter in PEFT layout, beside final/ (LoRA runs only)
	BaseDir        = "base"    // a LoRA run's base, when it has no directory of its own
	RewardsPlot    = "rewards.png"
	runStateFile   = "run_state.json"
)

// RunState is what a checkpoint adds to the trainer's state: which run it
// belongs to and the next step to run. It is written last, so a checkpoint
// without it is incomplete and is never resumed from.
type RunState struct {
	RunID    string `json:"run_id"`
	NextStep int    `json:"next_step"`
	// WeightsVersion is the GRPO updates applied to the checkpoint's
	// weights (Engine.Version); absent in older checkpoints, which count
	// NextStep (Version).
	WeightsVersion *int      `json:"weights_version,omitempty"`
	SavedAt        time.Time `json:"saved_at"`
	// Steps are the metrics of the steps before NextStep as the trainer
	// saw them. The runner writes a step's metrics line after the step's
	// checkpoint, so a crash between the two leaves the line only here;
	// a resume restores it from here (TrimOutputs).
	Steps []core.StepMetrics `json:"steps,omitempty"`
}

// Sink is the runner's step sink that trains: each finished step's groups
// become one GRPO update of the engine's model, applied between steps
// while the server is paused.
type Sink struct {
	Engine   *Engine
	Settings *Settings
	RunID    string
	OutDir   string
	Title    string       // of the reward plot
	Logger   hclog.Logger // nil for none

	steps     []core.StepMetrics // for the plot, resumed ones included
	lastSaved int                // next_step of the newest checkpoint; -1 none
	nextStep  int
	stall     stallWatch
}

var _ runner.StepSink = (*Sink)(nil)

// NewSink makes the sink. A resumed run passes the step it resumes at
// (its checkpoint's next step) and the metrics of the steps before it, for
// the plot; a fresh run passes 0 and nil.
func NewSink(e *Engine, s *Settings, runID, outDir string, resumeAt int, earlier []core.StepMetrics) *Sink {
	k := &Sink{Engine: e, Settings: s, RunID: runID, OutDir: outDir, steps: earlier, lastSaved: -1}
	if resumeAt > 0 {
		k.nextStep, k.lastSaved = resumeAt, resumeAt
	}
	return k
}

// EndStep trains on the step's groups and records what happened in its
// metrics. An interrupted step is not trained on: its groups are partial.
//
// One GRPO step, from the runner's finished step to the AdamW update:
//  1. the rollout's timings go into the metrics;
//  2. batch: the episodes to learn from become GRPO samples, grouped by
//     task (text-only turns from vLLM retokenised, episodes sampled by
//     weights too old dropped; samples.go, offpolicy.go);
//  3. update: grpo.Trainer.Step (trainer/grpo/trainer.go: advantages,
//     forward, loss, backward, AdamW) while the embedded server holds
//     generation off, the weights one version newer after it;
//  4. after: the reward plot, a checkpoint when due, and for a policy
//     served by vLLM the new adapter loaded there.
func (k *Sink) EndStep(ctx context.Context, st *runner.Step) error {
	m := st.Metrics
	splitRollout(st).Put(m.Extra)
	if st.Interrupted {
		return nil
	}
	if msg := k.stall.observe(m.Episodes > 0 && m.RewardStd == 0, m.RewardMean); msg != "" {
		k.logf("%s", msg)
	}
	batch, err := k.batch(st)
	if err != nil {
		return fmt.Errorf("training on step %d: %w", st.Index, err)
	}
	if !k.worthUpdating(st, batch) {
		return k.after(ctx, st)
	}
	stats, err := k.update(ctx, batch)
	if err != nil {
		return fmt.Errorf("training on step %d: %w", st.Index, err)
	}
	k.record(st, stats)
	if err := k.after(ctx, st); err != nil {
		return err
	}
	if k.Engine.Sync == nil || stats.Updates == 0 {
		return nil
	}
	return k.push(ctx, st)
}

// batch turns the step's episodes into GRPO groups.
func (k *Sink) batch(st *runner.Step) (Batch, error) {
	extra := st.Metrics.Extra
	trajs := st.Trajectories
	if k.Engine.Sync != nil {
		trajs = k.retokenize(trajs, extra)
	}
	if limit := k.Settings.MaxOffPolicySteps; limit > 0 {
		var ages StaleStats
		trajs, ages = dropStale(trajs, k.Engine.Version(), limit)
		ages.figures().Put(extra)
		if ages.Dropped > 0 {
			k.logf("step %d: %d episodes were sampled by weights more than max_off_policy_steps = %d updates old and are left out of training", st.Index, ages.Dropped, limit)
		}
	}
	batch, err := Samples(trajs)
	if err != nil {
		return Batch{}, err
	}
	fig := output.Batch{Groups: float64(len(batch.Groups)), SplitTurns: float64(batch.SplitTurns), Skipped: map[string]float64{}}
	for reason, n := range batch.Skipped {
		fig.Skipped[reason] = float64(n)
	}
	fig.Put(extra)
	return batch, nil
}

// worthUpdating reports whether the batch can move the weights; when not,
// it records why the update is skipped.
func (k *Sink) worthUpdating(st *runner.Step, batch Batch) bool {
	extra := st.Metrics.Extra
	if len(batch.Groups) == 0 {
		k.logf("step %d: no episode to train on", st.Index)
		output.SkipUpdate(extra)
		return false
	}
	if !anyVariance(batch.Groups) && k.Engine.Trainer.Config().Beta == 0 {
		// Every advantage is 0, so the gradient is too; an optimiser step
		// would only replay Adam's momentum, which moves the weights with
		// no evidence behind the move. With beta > 0 the KL term still has
		// a gradient once the policy has left the reference, and the step
		// runs, as TRL's does.
		output.Batch{Groups: float64(len(batch.Groups)), ZeroStdGroups: float64(len(batch.Groups))}.Put(extra)
		output.SkipUpdate(extra)
		return false
	}
	return true
}

// update applies one GRPO step to the weights while generation is held
// off.
func (k *Sink) update(ctx context.Context, batch Batch) (grpo.Stats, error) {
	var stats grpo.Stats
	start := time.Now()
	err := k.Engine.Update(ctx, func() (bool, error) {
		var err error
		stats, err = k.Engine.Trainer.Step(ctx, batch.Groups)
		return stats.Updates > 0, err
	})
	stats.Total = time.Since(start)
	return stats, err
}

// record puts a training step's figures into its metrics.
func (k *Sink) record(st *runner.Step, s grpo.Stats) {
	extra := st.Metrics.Extra
	u := output.Update{Loss: s.Loss, KL: s.KL, GradNorm: s.GradNorm, LR: s.LR,
		ClipLow: s.ClipLow, ClipHigh: s.ClipHigh, ClipRegion: s.ClipRegion,
		Tokens: float64(s.Tokens), Sequences: float64(s.Sequences), Updates: float64(s.Updates),
		SampleLogProbDiff: s.SampleLogProbDiff, Seconds: s.Total.Seconds(),
		SampleRatioMean: s.SampleRatioMean, SampleRatioMax: s.SampleRatioMax, SampleRatioClipped: s.SampleRatioClipped}
	if s.SampleRatioMax > 0 {
		u = u.WithRatio()
	}
	u.Put(extra)
	output.Batch{Groups: float64(s.Groups), ZeroStdGroups: float64(s.ZeroStdGroups)}.Put(extra)
	k.warnDrift(st.Index, s)
	if s.Skipped != "" {
		output.SkipUpdate(extra)
		k.logf("step %d: update skipped: %s", st.Index, s.Skipped)
	}
}

// anyVariance reports whether some group's rewards differ.
func anyVariance(groups [][]grpo.Sample) bool {
	for _, g := range groups {
		for _, s := range g[1:] {
			if s.Reward != g[0].Reward {
				return true
			}
		}
	}
	return false
}

// after records the step for the plot and checkpoints when due.
func (k *Sink) after(_ context.Context, st *runner.Step) error {
	k.nextStep = st.Index + 1
	k.steps = append(k.steps, *st.Metrics)
	if err := PlotRewards(filepath.Join(k.OutDir, RewardsPlot), k.Title, k.steps); err != nil {
		k.logf("cannot draw %s: %v", RewardsPlot, err)
	}
	if n := k.Settings.CheckpointEvery; n > 0 && k.nextStep%n == 0 {
		return k.checkpoint()
	}
	return nil
}

// Finish saves what the run has reached: a checkpoint unless the newest
// one is current, and, when the run completed, the final model in Hugging
// Face layout under OUT/final (merged, for a LoRA run, whose adapter goes
// to OUT/adapter in PEFT layout, and its base to OUT/base when the base
// has no directory of its own).
func (k *Sink) Finish(completed bool) error {
	if k.nextStep > 0 && k.lastSaved != k.nextStep {
		if err := k.checkpoint(); err != nil {
			return err
		}
	}
	if !completed {
		return nil
	}
	dt := safetensors.F32
	if k.Settings.SaveDType == "bf16" {
		dt = safetensors.BF16
	}
	dir := filepath.Join(k.OutDir, FinalDir)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("final model: %w", err)
	}
	if err := k.Engine.SaveModel(dir, dt); err != nil {
		return fmt.Errorf("final model: %w", err)
	}
	adir, bdir := filepath.Join(k.OutDir, AdapterDir), filepath.Join(k.OutDir, BaseDir)
	for _, d := range []string{adir, bdir} {
		if err := os.RemoveAll(d); err != nil {
			return fmt.Errorf("final adapter: %w", err)
		}
	}
	if _, err := k.Engine.SaveAdapter(adir, bdir); err != nil {
		return fmt.Errorf("final adapter: %w", err)
	}
	return nil
}

func (k *Sink) checkpoint() error {
	dir := filepath.Join(k.OutDir, CheckpointsDir, fmt.Sprintf("step-%06d", k.nextStep))
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	// The model is not being trained between steps, but the server may be
	// generating: Update holds it off while the weights are read.
	err := k.Engine.Exclusive(context.Background(), func() error { return k.Engine.Checkpoint(dir) })
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	b, _ := json.MarshalIndent(RunState{RunID: k.RunID, NextStep: k.nextStep, WeightsVersion: ptr(k.Engine.Version()), SavedAt: time.Now().UTC(), Steps: k.steps}, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, runStateFile), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	k.lastSaved = k.nextStep
	k.prune()
	return nil
}

// prune keeps the newest KeepCheckpoints complete checkpoints.
func (k *Sink) prune() {
	all, _ := Checkpoints(k.OutDir)
	for len(all) > k.Settings.KeepCheckpoints {
		if err := os.RemoveAll(all[0]); err != nil {
			k.logf("cannot remove old checkpoint %s: %v", all[0], err)
		}
		all = all[1:]
	}
}

func (k *Sink) logf(format string, args ...any) {
	if k.Logger != nil {
		k.Logger.Warn(fmt.Sprintf(format, args...))
	}
}

// Version is the version of the checkpoint's weights.
func (s RunState) Version() int {
	if s.WeightsVersion != nil {
		return *s.WeightsVersion
	}
	return s.NextStep
}

func ptr[T any](v T) *T { return &v }

// Checkpoints lists the complete checkpoints under outDir, oldest first.
func Checkpoints(outDir string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(outDir, CheckpointsDir))
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	var out []string
	for _, e := range entries {
		dir := filepath.Join(outDir, CheckpointsDir, e.Name())
		if e.IsDir() && strings.HasPrefix(e.Name(), "step-") {
			if _, err := os.Stat(filepath.Join(dir, runStateFile)); err == nil {
				out = append(out, dir)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// Latest returns the newest complete checkpoint under outDir and its state.
func Latest(outDir string) (string, RunState, error) {
	all, err := Checkpoints(outDir)
	if err != nil {
		return "", RunState{}, err
	}
	if len(all) == 0 {
		return "", RunState{}, fmt.Errorf("no complete checkpoint under %s", filepath.Join(outDir, CheckpointsDir))
	}
	dir := all[len(all)-1]
	b, err := os.ReadFile(filepath.Join(dir, runStateFile))
	if err != nil {
		return "", RunState{}, err
	}
	var s RunState
	if err := json.Unmarshal(b, &s); err != nil {
		return "", RunState{}, fmt.Errorf("%s: %w", filepath.Join(dir, runStateFile), err)
	}
	return dir, s, nil
}

// splitRollout divides the rollout's wall clock between generation and
// scoring in proportion to the time episodes spent waiting on the policy
// and on everything else (sandboxes, the environment).
func splitRollout(st *runner.Step) output.RolloutTimes {
	t := output.RolloutTimes{Rollout: st.Rollout.Seconds()}
	t.Generation, t.Scoring = splitTime(st)
	return t
}

func splitTime(st *runner.Step) (gen, score float64) {
	var p, total float64
	for _, t := range st.Trajectories {
		total += t.DurationMS
		for _, tr := range t.Turns {
			p += tr.PolicyMS
		}
	}
	if total <= 0 {
		return 0, 0
	}
	frac := min(1, p/total)
	r := st.Rollout.Seconds()
	return r * frac, r * (1 - frac)
}

// Resumable is what a resumed run takes over from the outputs of the
// process it continues.
type Resumable struct {
	// Metrics are the metrics lines of the steps before the checkpoint's
	// next step.
	Metrics []core.StepMetrics
	// Ahead are the episodes of later steps that finished (rollouts run
	// ahead of training, or the step Ctrl-C cut short): the resumed run
	// uses them instead of running them again, so none is lost and none
	// trained twice.
	Ahead []core.Trajectory
}

// TrimOutputs cuts the outputs of outDir back to the checkpoint, so a
// resumed run continues the files as if it had never stopped: metrics
// lines of steps at or after the checkpoint's next step go, and lines the
// checkpoint has but the file lost to a crash come back; of the
// trajectories of those steps, the episodes Ctrl-C cancelled go and the
// finished ones stay, returned in Ahead.
func TrimOutputs(outDir string, st RunState) (Resumable, error) {
	nextStep := st.NextStep
	var res Resumable
	for _, name := range []string{output.TrajectoriesFile, output.MetricsFile} {
		path := filepath.Join(outDir, name)
		data, err := os.ReadFile(path)
		if os.IsNotExist(err) && name == output.TrajectoriesFile {
			continue
		} else if err != nil && !os.IsNotExist(err) {
			return Resumable{}, err
		}
		var out []byte
		for line := range strings.Lines(string(data)) {
			var head struct {
				Step         *int   `json:"step"`
				FinishReason string `json:"finish_reason"`
			}
			if json.Unmarshal([]byte(line), &head) != nil || head.Step == nil {
				continue
			}
			if *head.Step >= nextStep {
				if name != output.TrajectoriesFile || head.FinishReason == core.FinishCancelled {
					continue
				}
				var t core.Trajectory
				if json.Unmarshal([]byte(line), &t) != nil {
					continue
				}
				res.Ahead = append(res.Ahead, t)
			}
			out = append(out, line...)
			if name == output.MetricsFile {
				var m core.StepMetrics
				if json.Unmarshal([]byte(line), &m) == nil {
					res.Metrics = append(res.Metrics, m)
				}
			}
		}
		if name == output.MetricsFile {
			var err error
			if out, res.Metrics, err = restoreMetrics(out, res.Metrics, st); err != nil {
				return Resumable{}, err
			}
		}
		tmp := path + ".resume"
		if err := os.WriteFile(tmp, out, 0o644); err != nil {
			return Resumable{}, err
		}
		if err := os.Rename(tmp, path); err != nil {
			return Resumable{}, err
		}
	}
	slices.SortFunc(res.Metrics, func(a, b core.StepMetrics) int { return a.Step - b.Step })
	return res, nil
}

// restoreMetrics appends to the metrics file's kept lines the checkpoint's
// steps they lack.
func restoreMetrics(out []byte, kept []core.StepMetrics, st RunState) ([]byte, []core.StepMetrics, error) {
	have := map[int]bool{}
	for _, m := range kept {
		have[m.Step] = true
	}
	for _, m := range st.Steps {
		if m.Step >= st.NextStep || have[m.Step] {
			continue
		}
		b, err := json.Marshal(m)
		if err != nil {
			return nil, nil, err
		}
		if len(out) > 0 && out[len(out)-1] != '\n' {
			out = append(out, '\n')
		}
		out = append(append(out, b...), '\n')
		kept = append(kept, m)
		have[m.Step] = true
	}
	return out, kept, nil
}
