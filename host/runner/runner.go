package runner

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/envplugin"
	"github.com/rlhost/rlhost/core/labels"
	"github.com/rlhost/rlhost/core/sandboxplugin"
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
func (r *Runner) Run(ctx context.Context) (res Result, err error) {
	if r.Logger == nil {
		r.Logger = hclog.NewNullLogger()
	}
	if r.Settings.MaxPolicyFailures <= 0 {
		r.Settings.MaxPolicyFailures = DefaultMaxPolicyFailures
	}
	sum := output.Summary{RunID: r.RunID, ConfigPath: r.ConfigPath, TotalSteps: r.Settings.Steps, StartedAt: time.Now().UTC(),
		Recovered: r.Recovered}
	tasks, err := r.Env.Tasks(ctx)
	if err != nil {
		return Result{Summary: sum}, fmt.Errorf("env %s: %w", r.EnvName, err)
	}
	if len(tasks) == 0 {
		return Result{Summary: sum}, fmt.Errorf("env %s has no tasks", r.EnvName)
	}
	sampler := newSampler(tasks, r.Settings.Seed)
	for range r.Settings.StartStep {
		sampler.next(r.Settings.BatchSize)
	}
	_ = r.Out.WriteSummary(sum)

	interrupted := false
	first := ""
	defer func() { res.FirstError = first }()
	for step := r.Settings.StartStep; step < r.Settings.Steps; step++ {
		if ctx.Err() != nil {
			interrupted = true
			break
		}
		batch := sampler.next(r.Settings.BatchSize)
		start := time.Now()
		if r.Observe != nil {
			r.Observe.StepStarted(step)
		}
		trajs := r.step(ctx, step, batch)
		rollout := time.Since(start)
		if ctx.Err() != nil {
			interrupted = true
		}
		if len(trajs) == 0 {
			break
		}
		if first == "" {
			for _, t := range trajs {
				if t.Error != "" && t.FinishReason != core.FinishCancelled {
					first = t.Error
					break
				}
			}
		}
		m := aggregate(r.RunID, step, trajs)
		st := &Step{Index: step, Trajectories: trajs, Metrics: &m, Interrupted: interrupted, Rollout: rollout}
		for _, s := range r.Sinks {
			if err := s.EndStep(ctx, st); err != nil {
				sum.EndedAt = time.Now().UTC()
				_ = r.Out.WriteSummary(sum)
				return Result{Summary: sum, Interrupted: interrupted}, err
			}
		}
		m.DurationMS = ms(time.Since(start))
		if interrupted {
			m.Extra["interrupted"] = 1
		}
		if err := r.Out.WriteStep(m); err != nil {
			return Result{Summary: sum, Interrupted: interrupted}, err
		}
		sum.AddStep(m)
		if err := r.Out.WriteSummary(sum); err != nil {
			return Result{Summary: sum, Interrupted: interrupted}, err
		}
		if r.Progress != nil {
			fmt.Fprintln(r.Progress, output.ProgressLine(m, r.Settings.Steps))
		}
		if interrupted {
			break
		}
		if err := r.fatalErr(); err != nil {
			sum.EndedAt = time.Now().UTC()
			_ = r.Out.WriteSummary(sum)
			return Result{Summary: sum}, fmt.Errorf("stopping the run: %w", err)
		}
	}
	sum.Interrupted = interrupted
	sum.EndedAt = time.Now().UTC()
	if err := r.Out.WriteSummary(sum); err != nil {
		return Result{Summary: sum, Interrupted: interrupted}, err
	}
	return Result{Summary: sum, Interrupted: interrupted}, nil
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

// step runs batch × group episodes with at most Concurrency in flight and
// returns the trajectories of the episodes that ran.
func (r *Runner) step(ctx context.Context, step int, batch []core.Task) []core.Trajectory {
	sem := make(chan struct{}, r.Settings.Concurrency)
	var mu sync.Mutex
	var out []core.Trajectory
	var wg sync.WaitGroup
launch:
	for g, task := range batch {
		share := &groupShare{n: r.Settings.GroupSize, seed: episodeSeed(r.Settings.Seed, step, g, 0)}
		for i := 0; i < r.Settings.GroupSize; i++ {
			if r.fatalErr() != nil {
				break launch
			}
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				break launch
			}
			wg.Add(1)
			if r.Observe != nil {
				r.Observe.EpisodeStarted()
			}
			go func(g, i int, task core.Task) {
				defer wg.Done()
				defer func() { <-sem }()
				t := r.episode(ctx, step, g, i, task, share)
				sanitize(&t)
				if err := r.Out.WriteTrajectory(t); err != nil {
					// Going on would run episodes whose results are lost.
					r.setFatal(fmt.Errorf("write trajectory: %w", err))
				}
				mu.Lock()
				out = append(out, t)
				mu.Unlock()
			}(g, i, task)
		}
	}
	wg.Wait()
	// Episodes finish in any order; sinks and files downstream want them by
	// group and index.
	slices.SortFunc(out, func(a, b core.Trajectory) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Index, b.Index))
	})
	return out
}

func (r *Runner) episode(parent context.Context, step, group, index int, task core.Task, share *groupShare) (t core.Trajectory) {
	start := time.Now()
	epID := fmt.Sprintf("%s/s%d/g%d/e%d", r.RunID, step, group, index)
	t = core.Trajectory{RunID: r.RunID, Step: step, Group: group, Index: index, TaskID: task.ID, Env: r.EnvName,
		StartedAt: start.UTC(), Metrics: map[string]float64{}, Info: map[string]string{}}
	defer func() { t.DurationMS = ms(time.Since(start)) }()

	ctx, cancel := context.WithTimeout(parent, r.Settings.EpisodeTimeout)
	defer cancel()
	cleanup := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(parent), cleanupTimeout)
	}
	fail := func(reason string, err error) core.Trajectory {
		t.FinishReason = reason
		if err != nil {
			t.Error = err.Error()
		}
		return t
	}

	var sandbox envplugin.Sandbox // nil for an env that runs no commands
	if r.Backend != nil {
		spec := r.Spec
		spec.Labels = maps.Clone(r.Spec.Labels)
		if spec.Labels == nil {
			spec.Labels = map[string]string{}
		}
		spec.Labels[LabelRun] = r.RunID
		spec.Labels[LabelEnv] = r.EnvName
		spec.Labels[LabelEpisode] = fmt.Sprintf("s%d-g%d-e%d", step, group, index)
		// A backend that lends its sandboxes itself serves the env's calls
		// without the host relaying them; it counts what it served.
		lender := sandboxplugin.LenderOf(r.Backend)
		info, lease, err := lender.CreateLent(ctx, spec, r.ExecTimeout)
		if err != nil {
			return fail(finishFor(parent, ctx, core.FinishError), err)
		}
		t.SandboxID = info.ID
		if info.Isolation != "" {
			t.Info["isolation"] = info.Isolation
		}
		lent := &lentSandbox{Counted: sandboxplugin.Counted{Bound: sandboxplugin.Bound{Backend: r.Backend, SandboxID: info.ID, DefaultTimeout: r.ExecTimeout}}, lease: lease}
		sandbox = lent
		defer func() {
			cctx, ccancel := cleanup()
			defer ccancel()
			backendUse, derr := lender.DestroyLent(cctx, info.ID)
			if derr != nil && !errors.Is(derr, core.ErrNotFound) {
				r.Logger.Warn("cannot destroy sandbox", "sandbox", info.ID, "error", derr)
				t.Info["destroy_error"] = derr.Error()
			}
			if derr != nil && lease.Socket != "" {
				// The backend's count comes with a successful destroy only.
				t.Info["sandbox_metrics"] = "incomplete: the calls the backend served went uncounted"
			}
			// Host-side counters get their own names so an env's metrics of
			// the same meaning never collide with them. Calls the host
			// relayed and calls the backend served are both counted.
			use := lent.Use().Add(backendUse)
			t.Metrics["sandbox_execs"] = float64(use.Execs)
			t.Metrics["sandbox_timeouts"] = float64(use.Timeouts)
			t.Metrics["sandbox_exec_ms"] = float64(use.ExecTime) / 1e6
		}()
	}

	sess, obs, err := r.Env.NewEpisode(ctx, envplugin.Episode{
		ID: epID, Task: task, Sandbox: sandbox, Seed: episodeSeed(r.Settings.Seed, step, group, index), Group: group, Index: index,
	})
	if err != nil {
		return fail(finishFor(parent, ctx, core.FinishError), fmt.Errorf("start episode: %w", err))
	}
	t.Messages = append(t.Messages, obs.Messages...)
	t.Tools = obs.Tools
	merge(&t, obs)

	reason := ""
	var loopErr error
	for turn := 0; !obs.Done; turn++ {
		if turn >= r.Settings.MaxTurns {
			reason = core.FinishMaxTurns
			break
		}
		tr := core.Turn{Index: turn, MessageIndex: -1}
		req := policyRequest(t, task, step, group, index, turn, episodeSeed(r.Settings.Seed, step, group, index))
		pstart := time.Now()
		choice, usage, err := r.complete(ctx, req, turn, share)
		tr.PolicyMS = ms(time.Since(pstart))
		tr.Usage = usage
		if err != nil {
			tr.Error = err.Error()
			t.Turns = append(t.Turns, tr)
			switch {
			case errors.Is(err, policy.ErrContextLength):
				reason = core.FinishContextLimit
			case errors.Is(err, policy.ErrRejected):
				// Retrying cannot fix a bad key or an unknown model, and
				// neither can the next thousand episodes.
				r.setFatal(fmt.Errorf("policy server rejected the request: %w", err))
				reason = core.FinishError
				loopErr = fmt.Errorf("policy: %w", err)
			default:
				reason = finishFor(parent, ctx, core.FinishError)
				loopErr = fmt.Errorf("policy: %w", err)
				if reason == core.FinishError {
					r.policyFailed(err)
				}
			}
			break
		}
		r.policyFailures.Store(0)
		msg := choice.Message
		msg.Role = core.RoleAssistant
		if msg.Content == "" && len(msg.ToolCalls) == 0 {
			tr.Empty = true
		}
		tr.ToolCalls = len(msg.ToolCalls)
		tr.MessageIndex = len(t.Messages)
		tr.PromptTokenIDs, tr.TokenIDs, tr.LogProbs = choice.PromptTokenIDs, choice.TokenIDs, choice.LogProbs
		tr.StopReason = choice.FinishReason
		t.Messages = append(t.Messages, msg)
		estart := time.Now()
		obs, err = sess.Step(ctx, msg)
		tr.EnvMS = ms(time.Since(estart))
		t.Turns = append(t.Turns, tr)
		if err != nil {
			reason = finishFor(parent, ctx, core.FinishError)
			loopErr = fmt.Errorf("env step: %w", err)
			break
		}
		t.Messages = append(t.Messages, obs.Messages...)
		merge(&t, obs)
	}

	ectx, ecancel := cleanup()
	defer ecancel()
	final, endErr := sess.End(ectx, reason)
	if reason == "" {
		t.Reward = obs.Reward
		t.FinishReason = obs.FinishReason
		if t.FinishReason == "" {
			t.FinishReason = core.FinishDone
		}
	} else {
		t.FinishReason = reason
		if endErr == nil {
			t.Reward = final.Reward
		}
	}
	if endErr == nil {
		merge(&t, final)
	} else if loopErr == nil && !errors.Is(endErr, core.ErrNotFound) {
		loopErr = fmt.Errorf("end episode: %w", endErr)
	}
	if loopErr != nil {
		t.Error = loopErr.Error()
	}
	return t
}

// policyFailed counts a failed request (after the policy's own retries);
// enough of them in a row mean the server is gone, and the run stops with
// the last error instead of failing every remaining episode.
func (r *Runner) policyFailed(err error) {
	if n := r.policyFailures.Add(1); n >= int64(r.Settings.MaxPolicyFailures) {
		r.setFatal(fmt.Errorf("%d policy requests in a row failed; the last: %w", n, err))
	}
}

// complete asks the policy for this episode's next message. On the first
// turn the episodes of a group usually see the same prompt, so one request
// with n = group size serves them all (what vLLM batches best); an episode
// whose prompt differs asks on its own.
func (r *Runner) complete(ctx context.Context, req policy.Request, turn int, share *groupShare) (policy.Choice, core.Usage, error) {
	if turn == 0 && share != nil && share.n > 1 {
		if c, u, ok, err := share.get(ctx, r.Policy, req); ok {
			return c, u, err
		}
	}
	resp, err := r.Policy.Complete(ctx, req)
	if err != nil {
		return policy.Choice{}, core.Usage{}, err
	}
	if len(resp.Choices) == 0 {
		return policy.Choice{}, resp.Usage, fmt.Errorf("policy returned no choices")
	}
	return resp.Choices[0], resp.Usage, nil
}

// groupShare is the one first-turn request of a group. It carries the
// seed of the group's episode 0 whichever episode sends it, so the group's
// samples do not depend on which of them got there first.
type groupShare struct {
	n    int
	seed int64
	done chan struct{}
	key  string
	resp policy.Response
	err  error
	mu   sync.Mutex
}

func (g *groupShare) get(ctx context.Context, p policy.Policy, req policy.Request) (policy.Choice, core.Usage, bool, error) {
	key := promptKey(req)
	g.mu.Lock()
	if g.done == nil {
		g.done = make(chan struct{})
		g.key = key
		g.mu.Unlock()
		shared := req
		shared.N, shared.Index, shared.Seed = g.n, 0, g.seed
		g.resp, g.err = p.Complete(ctx, shared)
		close(g.done)
	} else {
		g.mu.Unlock()
	}
	if g.key != key {
		return policy.Choice{}, core.Usage{}, false, nil
	}
	select {
	case <-g.done:
	case <-ctx.Done():
		return policy.Choice{}, core.Usage{}, true, ctx.Err()
	}
	if g.err != nil {
		// The leader's own episode may have been cancelled; others ask alone.
		if errors.Is(g.err, context.Canceled) || errors.Is(g.err, context.DeadlineExceeded) {
			return policy.Choice{}, core.Usage{}, false, nil
		}
		return policy.Choice{}, core.Usage{}, true, g.err
	}
	if req.Index >= len(g.resp.Choices) {
		return policy.Choice{}, core.Usage{}, false, nil
	}
	return g.resp.Choices[req.Index], shareUsage(g.resp, req.Index), true, nil
}

// shareUsage is member k's part of a group request's usage. Its completion
// tokens are its own when the server said (token ids or logprobs), else an
// even split. The one shared prompt is split evenly, the remainder going to
// the first members, so the members' figures add up to the request's.
func shareUsage(resp policy.Response, k int) core.Usage {
	n := len(resp.Choices)
	split := func(total, k int) int {
		q, rem := total/n, total%n
		if k < rem {
			q++
		}
		return q
	}
	u := core.Usage{PromptTokens: split(resp.Usage.PromptTokens, k)}
	known := 0
	for _, c := range resp.Choices {
		known += c.CompletionTokens
	}
	if c := resp.Choices[k]; known == resp.Usage.CompletionTokens && known > 0 {
		u.CompletionTokens = c.CompletionTokens
	} else {
		u.CompletionTokens = split(resp.Usage.CompletionTokens, k)
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

func promptKey(req policy.Request) string {
	b, _ := json.Marshal(struct {
		M []core.Message
		T []core.ToolSpec
	}{req.Messages, req.Tools})
	return string(b)
}

func policyRequest(t core.Trajectory, task core.Task, step, group, index, turn int, seed int64) policy.Request {
	return policy.Request{
		Messages: append([]core.Message(nil), t.Messages...), Tools: t.Tools, N: 1,
		TaskID: task.ID, Step: step, Group: group, Index: index, Turn: turn, Seed: seed,
	}
}

// merge folds an observation's metrics and info into the trajectory.
func merge(t *core.Trajectory, o envplugin.Observation) {
	for k, v := range o.Metrics {
		t.Metrics[k] = v
	}
	for k, v := range o.Info {
		t.Info[k] = v
	}
}

// finishFor names why an episode stopped when its context is the cause.
func finishFor(parent, ctx context.Context, otherwise string) string {
	switch {
	case parent.Err() != nil:
		return core.FinishCancelled
	case ctx.Err() != nil:
		return core.FinishTimeout
	}
	return otherwise
}

func episodeSeed(seed int64, step, group, index int) int64 {
	h := uint64(seed)*0x9E3779B97F4A7C15 ^ uint64(step)<<40 ^ uint64(group)<<20 ^ uint64(index)
	return int64(h & (1<<62 - 1))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// sampler walks the tasks in a seeded random order, reshuffling each epoch,
// so every task is seen once per epoch and runs are reproducible.
type sampler struct {
	tasks []core.Task
	order []int
	pos   int
	rng   *rand.Rand
}

func newSampler(tasks []core.Task, seed int64) *sampler {
	s := &sampler{tasks: tasks, rng: rand.New(rand.NewPCG(uint64(seed), 0x726c686f7374))}
	s.shuffle()
	return s
}

func (s *sampler) shuffle() {
	s.order = s.rng.Perm(len(s.tasks))
	s.pos = 0
}

func (s *sampler) next(n int) []core.Task {
	out := make([]core.Task, 0, n)
	for len(out) < n {
		if s.pos == len(s.order) {
			s.shuffle()
		}
		out = append(out, s.tasks[s.order[s.pos]])
		s.pos++
	}
	return out
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
