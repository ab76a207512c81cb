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
	"github.com/rlhost/rlhost/host/policy"
)

func (r *Runner) episode(parent context.Context, step, group, index int, task core.Task, share *groupShare) (t core.Trajectory) {
	start := time.Now()
	epID := fmt.Sprintf("%s/s%d/g%d/e%d", r.RunID, step, group, index)
	t = core.Trajectory{RunID: r.RunID, Step: step, Group: group, Index: index, TaskID: task.ID, Env: r.EnvName,
		StartedAt: start.UTC(), Metrics: map[string]float64{}, Info: map[string]string{}}
	defer func() { t.DurationMS = ms(time.Since(start)) }()
	if e, ok := r.Policy.(policy.EpisodeEnder); ok {
		// A fleet keeps an episode on one server while it runs.
		defer e.EndEpisode(policy.EpisodeKey{Step: step, Group: group, Index: index})
	}

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
		lender := lend.LenderOf(r.Backend)
		info, lease, err := lender.CreateLent(ctx, spec, r.ExecTimeout)
		if err != nil {
			return fail(finishFor(parent, ctx, core.FinishError), err)
		}
		t.SandboxID = info.ID
		if info.Isolation != "" {
			t.Info["isolation"] = info.Isolation
		}
		lent := &lend.Bound{Backend: r.Backend, SandboxID: info.ID, DefaultTimeout: r.ExecTimeout, BackendLease: lease}
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
			use := lent.Usage().Add(backendUse)
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
		tr.WeightsVersion = choice.WeightsVersion
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
