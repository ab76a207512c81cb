package output

import (
	"math"
	"time"

	"github.com/rlhost/rlhost/core"
)

// Keys of StepMetrics.Extra filled by Aggregate.
const (
	ExtraTurnsMean        = "turns_mean"
	ExtraToolCalls        = "tool_calls"
	ExtraEmptyTurns       = "empty_turns"
	ExtraPromptTokens     = "prompt_tokens"
	ExtraCompletionTokens = "completion_tokens"
	ExtraEpisodeMSMean    = "episode_ms_mean"
	ExtraNonFinite        = "nonfinite_rewards"
	// ExtraFinishPrefix+reason counts episodes per finish reason.
	ExtraFinishPrefix = "finish/"
	// ExtraMetricPrefix+key is the mean of trajectory metric key over every
	// episode of the step; an episode that does not report the metric (or
	// reports NaN or ±Inf) counts as 0. So an env that sets "passed" = 1 on
	// success only gets metric/passed equal to the pass rate, and an errored
	// episode pulls every mean down as it pulls down the reward.
	ExtraMetricPrefix = "metric/"
)

// Passed is the pass rule used by Aggregate: an episode passed when its
// reward is at least 1 (binary test rewards) or when the environment set
// Metrics["passed"] to exactly 1 (for shaped rewards whose maximum is not 1).
func Passed(t core.Trajectory) bool {
	return t.Reward >= 1 || t.Metrics["passed"] == 1
}

// TimedOut is the timeout rule used by Aggregate: the host stopped the
// episode on its deadline, the environment counted a timeout of its own
// (e.g. a test run killed inside the sandbox) in Metrics["timeouts"], or a
// sandbox exec hit its wall-clock limit (Metrics["sandbox_timeouts"], set by
// the runner).
func TimedOut(t core.Trajectory) bool {
	return t.FinishReason == core.FinishTimeout || t.Metrics["timeouts"] > 0 || t.Metrics[SandboxTimeouts] > 0
}

// Aggregate summarises one step's episodes. Reward statistics use the
// population standard deviation and skip non-finite rewards (counted in
// Extra[ExtraNonFinite]) because JSON cannot carry NaN. Errors counts
// episodes with a non-empty Error. DurationMS is the wall-clock span from the
// first episode's start to the last one's end; the runner may overwrite it
// with its own step timing. With no episodes every figure is zero.
func Aggregate(runID string, step int, trajs []core.Trajectory) core.StepMetrics {
	m := core.StepMetrics{RunID: runID, Step: step, Episodes: len(trajs)}
	if len(trajs) == 0 {
		return m
	}
	extra := map[string]float64{}
	var (
		sum, sumSq       float64
		finite, passed   int
		turns, durSum    float64
		first, last      time.Time
		metricSum        = map[string]float64{}
		minR, maxR       = math.Inf(1), math.Inf(-1)
		toolCalls, empty int
		promptT, complT  int
	)
	for _, t := range trajs {
		if math.IsNaN(t.Reward) || math.IsInf(t.Reward, 0) {
			extra[ExtraNonFinite]++
		} else {
			finite++
			sum += t.Reward
			minR = min(minR, t.Reward)
			maxR = max(maxR, t.Reward)
		}
		if Passed(t) {
			passed++
		}
		if t.Error != "" {
			m.Errors++
		}
		if TimedOut(t) {
			m.Timeouts++
		}
		if t.FinishReason != "" {
			extra[ExtraFinishPrefix+t.FinishReason]++
		}
		turns += float64(len(t.Turns))
		for _, tu := range t.Turns {
			toolCalls += tu.ToolCalls
			if tu.Empty {
				empty++
			}
			promptT += tu.Usage.PromptTokens
			complT += tu.Usage.CompletionTokens
		}
		durSum += t.DurationMS
		if !t.StartedAt.IsZero() {
			end := t.StartedAt.Add(time.Duration(t.DurationMS * float64(time.Millisecond)))
			if first.IsZero() || t.StartedAt.Before(first) {
				first = t.StartedAt
			}
			if end.After(last) {
				last = end
			}
		}
		for k, v := range t.Metrics {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				continue
			}
			metricSum[k] += v
		}
		for k := range t.Metrics {
			metricSum[k] += 0 // a key seen only as NaN still gets its mean
		}
	}
	if finite > 0 {
		m.RewardMean = sum / float64(finite)
		for _, t := range trajs {
			if !math.IsNaN(t.Reward) && !math.IsInf(t.Reward, 0) {
				d := t.Reward - m.RewardMean
				sumSq += d * d
			}
		}
		m.RewardStd = math.Sqrt(sumSq / float64(finite))
		m.RewardMin, m.RewardMax = minR, maxR
	}
	n := float64(len(trajs))
	m.PassRate = float64(passed) / n
	if !first.IsZero() {
		m.DurationMS = float64(last.Sub(first)) / float64(time.Millisecond)
	}
	extra[ExtraTurnsMean] = turns / n
	extra[ExtraToolCalls] = float64(toolCalls)
	extra[ExtraEmptyTurns] = float64(empty)
	extra[ExtraPromptTokens] = float64(promptT)
	extra[ExtraCompletionTokens] = float64(complT)
	extra[ExtraEpisodeMSMean] = durSum / n
	for k, s := range metricSum {
		extra[ExtraMetricPrefix+k] = s / n // missing counts as 0
	}
	m.Extra = extra
	return m
}
