package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/labels"
	"github.com/rlhost/rlhost/host/output"
	"github.com/rlhost/rlhost/host/policy"
)

// Labels the runner puts on every sandbox, so `rlhost sandbox list/rm` and
// orphan sweeps can find a run's sandboxes.
const (
	LabelRun     = labels.Run
	LabelEnv     = labels.Env
	LabelEpisode = labels.Episode
)

// cleanupTimeout bounds ending an episode and destroying its sandbox after
// the episode's own context is gone (timeout or Ctrl-C).
const cleanupTimeout = 30 * time.Second

// Runner runs one job: its fields are everything a run depends on, as
// interfaces, so a test can drive it with in-process fakes.
type Runner struct {
	RunID       string
	ConfigPath  string
	Settings    Settings
	EnvName     string
	Spec        core.SandboxSpec // the sandbox block's spec; labels get merged
	ExecTimeout time.Duration

	Env     Env
	Backend Backend
	Policy  policy.Policy
	Out     Recorder
	Sinks   []StepSink // after each step, before its metrics line is written
	Observe Observer   // nil for none

	Progress  io.Writer    // step lines and the final summary; nil for none
	Logger    hclog.Logger // nil for none
	Recovered []string     // what opening the outputs repaired, for the summary
	// Resumed are finished episodes of steps at or after
	// Settings.StartStep that an earlier process of this run left on
	// disk: they stand in for those episodes instead of running them
	// again, and are not written again.
	Resumed []core.Trajectory
	// Earlier is a resumed run's summary of the steps before StartStep
	// (output.Continued); Run adds to it. Nil for a run from step 0.
	Earlier *output.Summary

	fatalMu sync.Mutex
	fatal   error // a fault no later episode can escape (a rejected API key)

	policyFailures atomic.Int64 // consecutive failed policy requests
}

func (r *Runner) setFatal(err error) {
	r.fatalMu.Lock()
	defer r.fatalMu.Unlock()
	if r.fatal == nil {
		r.fatal = err
	}
}

func (r *Runner) fatalErr() error {
	r.fatalMu.Lock()
	defer r.fatalMu.Unlock()
	return r.fatal
}

// Result is what a run leaves behind besides its files.
type Result struct {
	Summary     output.Summary
	Interrupted bool
	FirstError  string // the first episode error, for a run that only failed
}

// Run executes every step, or stops early when ctx is cancelled: in-flight
// episodes are ended and their sandboxes destroyed, finished trajectories
// stay on disk, and the summary says the run was interrupted.
//
// Rollouts run ahead of the sinks by up to MaxOffPolicySteps steps (see
// rollouts); the sinks, the metrics lines and the summary still see the
// steps one at a time, in order.
func (r *Runner) Run(ctx context.Context) (res Result, err error) {
	r.setDefaults()
	sum := r.newSummary()
	sampler, err := r.openTasks(ctx)
	if err != nil {
		return Result{Summary: sum}, err
	}
	_ = r.Out.WriteSummary(sum)

	ro := r.startRollouts(ctx, sampler)
	defer ro.stop()
	interrupted := false
	first := ""
	defer func() { res.FirstError = first }()
	for step := r.Settings.StartStep; step < r.Settings.Steps; step++ {
		st, ok := ro.wait(ctx, step)
		if !ok || len(st.Trajectories) == 0 {
			// Never launched: Ctrl-C or a fatal fault came first.
			interrupted = interrupted || ctx.Err() != nil
			break
		}
		// A step that finished before Ctrl-C but is reported after it is
		// not trained either: the run is ending.
		st.Interrupted = st.Interrupted || ctx.Err() != nil
		interrupted = st.Interrupted
		if first == "" {
			first = firstError(st.Trajectories)
		}
		if err := r.endStep(ctx, st, &sum); err != nil {
			if ctx.Err() != nil && errors.Is(err, context.Canceled) {
				// Ctrl-C cut a sink short (a training step): the run is
				// interrupted, not broken.
				interrupted = true
				break
			}
			sum.EndedAt = time.Now().UTC()
			_ = r.Out.WriteSummary(sum)
			return Result{Summary: sum, Interrupted: interrupted}, err
		}
		ro.trained(step)
		if interrupted {
			break
		}
		if err := r.fatalErr(); err != nil {
			sum.EndedAt = time.Now().UTC()
			_ = r.Out.WriteSummary(sum)
			return Result{Summary: sum}, fmt.Errorf("stopping the run: %w", err)
		}
	}
	ro.stop()
	sum.Interrupted = interrupted
	sum.EndedAt = time.Now().UTC()
	if err := r.Out.WriteSummary(sum); err != nil {
		return Result{Summary: sum, Interrupted: interrupted}, err
	}
	return Result{Summary: sum, Interrupted: interrupted}, nil
}

func (r *Runner) setDefaults() {
	if r.Logger == nil {
		r.Logger = hclog.NewNullLogger()
	}
	if r.Settings.MaxPolicyFailures <= 0 {
		r.Settings.MaxPolicyFailures = DefaultMaxPolicyFailures
	}
	if r.Settings.MaxOffPolicySteps < 0 {
		r.Settings.MaxOffPolicySteps = 0
	}
}

// newSummary is the summary Run starts from; a resumed run's goes on from
// its earlier steps' (continueSummary).
func (r *Runner) newSummary() output.Summary {
	return r.continueSummary(output.Summary{RunID: r.RunID, ConfigPath: r.ConfigPath, TotalSteps: r.Settings.Steps, StartedAt: time.Now().UTC(),
		Recovered: r.Recovered})
}

// openTasks lists the env's tasks and replays the task order up to the
// step the run starts at, so step k sees the same tasks as in an
// uninterrupted run.
func (r *Runner) openTasks(ctx context.Context) (*sampler, error) {
	tasks, err := r.Env.Tasks(ctx)
	if err != nil {
		return nil, fmt.Errorf("env %s: %w", r.EnvName, err)
	}
	if len(tasks) == 0 {
		return nil, fmt.Errorf("env %s has no tasks", r.EnvName)
	}
	s := newSampler(tasks, r.Settings.Seed)
	for range r.Settings.StartStep {
		s.next(r.Settings.BatchSize)
	}
	return s, nil
}

// endStep hands a finished step to the sinks, then writes its metrics
// line and the summary, and prints its progress line.
func (r *Runner) endStep(ctx context.Context, st *Step, sum *output.Summary) error {
	for _, s := range r.Sinks {
		if err := s.EndStep(ctx, st); err != nil {
			return err
		}
	}
	m := st.Metrics
	m.DurationMS = ms(time.Since(st.Started))
	if st.Interrupted {
		m.Extra["interrupted"] = 1
	}
	if err := r.Out.WriteStep(*m); err != nil {
		return err
	}
	sum.AddStep(*m)
	if err := r.Out.WriteSummary(*sum); err != nil {
		return err
	}
	if r.Progress != nil {
		fmt.Fprintln(r.Progress, output.ProgressLine(*m, r.Settings.Steps))
	}
	return nil
}

// firstError is the first episode error of a step, Ctrl-C's aside.
func firstError(trajs []core.Trajectory) string {
	for _, t := range trajs {
		if t.Error != "" && t.FinishReason != core.FinishCancelled {
			return t.Error
		}
	}
	return ""
}

// aggregate summarises a step without the episodes Ctrl-C cut short: they
// say nothing about the policy, so they are counted apart.
func aggregate(runID string, step int, trajs []core.Trajectory) core.StepMetrics {
	var done []core.Trajectory
	cancelled := 0
	for _, t := range trajs {
		if t.FinishReason == core.FinishCancelled {
			cancelled++
			continue
		}
		done = append(done, t)
	}
	m := output.Aggregate(runID, step, done)
	if m.Extra == nil {
		m.Extra = map[string]float64{}
	}
	if cancelled > 0 {
		m.Extra["cancelled"] = float64(cancelled)
	}
	return m
}

// RunID makes a run id: the run name, the UTC start time and a short random
// suffix, so two runs of one config never share sandboxes or labels.
func RunID(name string, now time.Time) string {
	return name + "-" + now.UTC().Format("20060102-150405") + "-" + strconv.FormatUint(rand.Uint64()%0xffff, 16)
}

// sanitize replaces values JSON cannot carry (NaN, ±Inf from an env's
// arithmetic) so the trajectory is written rather than lost; what was
// replaced is noted in Info.
func sanitize(t *core.Trajectory) {
	if math.IsNaN(t.Reward) || math.IsInf(t.Reward, 0) {
		t.Info["non_finite_reward"] = strconv.FormatFloat(t.Reward, 'g', -1, 64)
		t.Reward = 0
	}
	for k, v := range t.Metrics {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			t.Info["non_finite_metric."+k] = strconv.FormatFloat(v, 'g', -1, 64)
			delete(t.Metrics, k)
		}
	}
}
