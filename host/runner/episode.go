package runner

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/sdk/envplugin"
	"github.com/rlhost/rlhost/core/sdk/wire/lend"
	"github.com/rlhost/rlhost/host/output"
	"github.com/rlhost/rlhost/host/policy"
)

// episode runs one episode from its sandbox to its trajectory:
//  1. a sandbox is created and lent to the env (lendSandbox);
//  2. the env poses the task (NewEpisode);
//  3. turns: the policy answers, the env steps, until the env is done or
//     max_turns, a timeout, Ctrl-C or a failure ends the episode (turn);
//  4. the env ends the episode and gives its final reward (end);
//  5. the sandbox is destroyed and what its calls cost is recorded.
//
// Whatever happens, a trajectory comes back: its FinishReason and Error
// say how the episode ended.
func (r *Runner) episode(parent context.Context, step, group, index int, task core.Task, share *groupShare) (traj core.Trajectory) {
	start := time.Now()
	e := &episodeRun{r: r, parent: parent, task: task, share: share, seed: episodeSeed(r.Settings.Seed, step, group, index),
		t: core.Trajectory{RunID: r.RunID, Step: step, Group: group, Index: index, TaskID: task.ID, Env: r.EnvName,
			StartedAt: start.UTC(), Metrics: map[string]float64{}, Info: map[string]string{}}}
	// On the result, not e.t: a return copies e.t before deferred calls run.
	// Registered first, so it runs last and counts the sandbox's destroy.
	defer func() { traj.DurationMS = ms(time.Since(start)) }()
	if ender, ok := r.Policy.(policy.EpisodeEnder); ok {
		// A fleet keeps an episode on one server while it runs.
		defer ender.EndEpisode(policy.EpisodeKey{Step: step, Group: group, Index: index})
	}
	var cancel context.CancelFunc
	e.ctx, cancel = context.WithTimeout(parent, r.Settings.EpisodeTimeout)
	defer cancel()

	sandbox, release, err := e.lendSandbox()
	if err != nil {
		return e.fail(err)
	}
	defer release()
	sess, obs, err := r.Env.NewEpisode(e.ctx, envplugin.Episode{
		ID: fmt.Sprintf("%s/s%d/g%d/e%d", r.RunID, step, group, index), Task: task, Sandbox: sandbox,
		Seed: e.seed, Group: group, Index: index,
	})
	if err != nil {
		return e.fail(fmt.Errorf("start episode: %w", err))
	}
	e.t.Messages = append(e.t.Messages, obs.Messages...)
	e.t.Tools = obs.Tools
	merge(&e.t, obs)
	for turn := 0; !obs.Done && e.reason == ""; turn++ {
		if turn >= r.Settings.MaxTurns {
			e.reason = core.FinishMaxTurns
			break
		}
		obs = e.turn(sess, turn, obs)
	}
	e.end(sess, obs)
	return e.t
}

// episodeRun is one episode under way.
type episodeRun struct {
	r           *Runner
	parent, ctx context.Context // the run's, and the episode's own (its timeout)
	task        core.Task
	share       *groupShare
	seed        int64

	t       core.Trajectory
	reason  string // why the turns stopped early; "" while they go on, or when the env finished
	loopErr error  // the failure that stopped them, if one did
}

// fail ends an episode that could not start.
func (e *episodeRun) fail(err error) core.Trajectory {
	e.t.FinishReason = finishFor(e.parent, e.ctx, core.FinishError)
	e.t.Error = err.Error()
	return e.t
}

// cleanup is a context for ending the episode and destroying its sandbox
// after its own context is gone (timeout or Ctrl-C).
func (e *episodeRun) cleanup() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(e.parent), cleanupTimeout)
}

// lendSandbox creates the episode's sandbox and the Sandbox the env is
// lent (nil for an env that runs no commands). release destroys the
// sandbox and records the calls it served in the episode's metrics.
func (e *episodeRun) lendSandbox() (sandbox envplugin.Sandbox, release func(), err error) {
	r, t := e.r, &e.t
	if r.Backend == nil {
		return nil, func() {}, nil
	}
	spec := r.Spec
	spec.Labels = maps.Clone(r.Spec.Labels)
	if spec.Labels == nil {
		spec.Labels = map[string]string{}
	}
	spec.Labels[LabelRun] = r.RunID
	spec.Labels[LabelEnv] = r.EnvName
	spec.Labels[LabelEpisode] = fmt.Sprintf("s%d-g%d-e%d", t.Step, t.Group, t.Index)
	// A backend that lends its sandboxes itself serves the env's calls
	// without the host relaying them; it counts what it served.
	lender := lend.LenderOf(r.Backend)
	info, lease, err := lender.CreateLent(e.ctx, spec, r.ExecTimeout)
	if err != nil {
		return nil, nil, err
	}
	t.SandboxID = info.ID
	if info.Isolation != "" {
		t.Info["isolation"] = info.Isolation
	}
	lent := &lend.Bound{Backend: r.Backend, SandboxID: info.ID, DefaultTimeout: r.ExecTimeout, BackendLease: lease}
	return lent, func() {
		cctx, ccancel := e.cleanup()
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
		use := lent.Usage().Add(backendUse)
		output.SandboxUse{Execs: float64(use.Execs), Timeouts: float64(use.Timeouts), ExecMS: float64(use.ExecTime) / 1e6}.Put(t.Metrics)
	}, nil
}

// turn asks the policy for the next message and hands it to the env. It
// returns what the env answered; when the turn failed, e.reason says why
// the episode stops.
func (e *episodeRun) turn(sess envplugin.Session, turn int, obs envplugin.Observation) envplugin.Observation {
	r, t := e.r, &e.t
	tr := core.Turn{Index: turn, MessageIndex: -1}
	req := policyRequest(*t, e.task, t.Step, t.Group, t.Index, turn, e.seed)
	pstart := time.Now()
	choice, usage, err := r.complete(e.ctx, req, turn, e.share)
	tr.PolicyMS = ms(time.Since(pstart))
	tr.Usage = usage
	if err != nil {
		tr.Error = err.Error()
		t.Turns = append(t.Turns, tr)
		e.policyFailed(err)
		return obs
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
	tr.WeightsVersion = choice.WeightsVersion
	t.Messages = append(t.Messages, msg)
	estart := time.Now()
	next, err := sess.Step(e.ctx, msg)
	tr.EnvMS = ms(time.Since(estart))
	t.Turns = append(t.Turns, tr)
	if err != nil {
		e.reason = finishFor(e.parent, e.ctx, core.FinishError)
		e.loopErr = fmt.Errorf("env step: %w", err)
		return obs
	}
	t.Messages = append(t.Messages, next.Messages...)
	merge(t, next)
	return next
}

// policyFailed decides how a failed policy call ends the episode.
func (e *episodeRun) policyFailed(err error) {
	switch {
	case errors.Is(err, policy.ErrContextLength):
		e.reason = core.FinishContextLimit
	case errors.Is(err, policy.ErrRejected):
		// Retrying cannot fix a bad key or an unknown model, and
		// neither can the next thousand episodes.
		e.r.setFatal(fmt.Errorf("policy server rejected the request: %w", err))
		e.reason = core.FinishError
		e.loopErr = fmt.Errorf("policy: %w", err)
	default:
		e.reason = finishFor(e.parent, e.ctx, core.FinishError)
		e.loopErr = fmt.Errorf("policy: %w", err)
		if e.reason == core.FinishError {
			e.r.policyFailed(err)
		}
	}
}

// end tells the env the episode is over and records how it ended: the
// env's own verdict when it finished, else why the runner stopped it and
// what reward the env gives for that.
func (e *episodeRun) end(sess envplugin.Session, obs envplugin.Observation) {
	t := &e.t
	ectx, ecancel := e.cleanup()
	defer ecancel()
	final, endErr := sess.End(ectx, e.reason)
	if e.reason == "" {
		t.Reward = obs.Reward
		t.FinishReason = obs.FinishReason
		if t.FinishReason == "" {
			t.FinishReason = core.FinishDone
		}
	} else {
		t.FinishReason = e.reason
		if endErr == nil {
			t.Reward = final.Reward
		}
	}
	loopErr := e.loopErr
	if endErr == nil {
		merge(t, final)
	} else if loopErr == nil && !errors.Is(endErr, core.ErrNotFound) {
		loopErr = fmt.Errorf("end episode: %w", endErr)
	}
	if loopErr != nil {
		t.Error = loopErr.Error()
	}
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
