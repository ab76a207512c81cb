package output

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// The figures training adds to a step's line in metrics.jsonl, under
// extra, are named here and nowhere else. Each group is a struct: the
// trainer fills one and Puts it, and the terminal (ProgressLine) and
// anyone else reading metrics.jsonl get it back with its Of function,
// which also says whether the step has the group at all. docs/training.md
// lists what each figure means.

// figure is one figure of a group: its name in extra and its field.
type figure struct {
	name string
	v    *float64
}

func putFigures(extra map[string]float64, fs []figure) {
	for _, f := range fs {
		extra[f.name] = *f.v
	}
}

// readFigures fills fs from extra and reports whether any was there.
func readFigures(extra map[string]float64, fs []figure) bool {
	found := false
	for _, f := range fs {
		if v, ok := extra[f.name]; ok {
			*f.v, found = v, true
		}
	}
	return found
}

// RolloutTimes is how a step's rollout wall clock divides between the
// policy and everything else (sandboxes, the environment), in seconds.
type RolloutTimes struct {
	Rollout, Generation, Scoring float64
}

func (t *RolloutTimes) figures() []figure {
	return []figure{{"time/rollout_s", &t.Rollout}, {"time/generation_s", &t.Generation}, {"time/scoring_s", &t.Scoring}}
}

// Put adds the times to a step's extra.
func (t RolloutTimes) Put(extra map[string]float64) { putFigures(extra, t.figures()) }

// RolloutTimesOf reads them back.
func RolloutTimesOf(extra map[string]float64) (t RolloutTimes, ok bool) {
	return t, readFigures(extra, t.figures())
}

// Batch is what a training step had to learn from.
type Batch struct {
	Groups, ZeroStdGroups float64 // GRPO groups, and those whose rewards were all equal
	SplitTurns            float64 // turns that started a sample of their own
	// Skipped counts the episodes left out, by reason ("error",
	// "cancelled", "empty"), as train/skipped_REASON.
	Skipped map[string]float64
}

const skippedPrefix = "train/skipped_"

// Put adds the batch's figures to a step's extra.
func (b Batch) Put(extra map[string]float64) {
	extra["train/groups"] = b.Groups
	extra["train/zero_std_groups"] = b.ZeroStdGroups
	if b.SplitTurns > 0 {
		extra["train/split_turns"] = b.SplitTurns
	}
	for reason, n := range b.Skipped {
		extra[skippedPrefix+reason] = n
	}
}

// BatchOf reads them back.
func BatchOf(extra map[string]float64) (Batch, bool) {
	b := Batch{Skipped: map[string]float64{}}
	g, ok := extra["train/groups"]
	b.Groups, b.ZeroStdGroups, b.SplitTurns = g, extra["train/zero_std_groups"], extra["train/split_turns"]
	for k, v := range extra {
		if reason, is := strings.CutPrefix(k, skippedPrefix); is && k != skippedUpdate {
			b.Skipped[reason] = v
		}
	}
	return b, ok
}

// skippedUpdate is 1 in a step that applied no update.
const skippedUpdate = "train/skipped_update"

// SkipUpdate records that a step applied no update.
func SkipUpdate(extra map[string]float64) { extra[skippedUpdate] = 1 }

// UpdateSkipped reports whether a step applied no update.
func UpdateSkipped(extra map[string]float64) bool { return extra[skippedUpdate] == 1 }

// Update is one GRPO update's figures (grpo.Stats, docs/grpo.md).
type Update struct {
	Loss, KL, GradNorm, LR          float64
	ClipLow, ClipHigh, ClipRegion   float64
	Tokens, Sequences, Updates      float64
	SampleLogProbDiff               float64 // mean |trainer − sampler log-prob|
	SampleRatioMean, SampleRatioMax float64 // exp(trainer − sampler log-prob), when the sampler said its log-probs
	SampleRatioClipped              float64 // the share of those ratios outside the sampling clip range
	Seconds                         float64 // wall clock of the update, generation held off
	hasRatio                        bool
}

func (u *Update) figures() []figure {
	return []figure{{"train/loss", &u.Loss}, {"train/kl", &u.KL}, {"train/grad_norm", &u.GradNorm}, {"train/lr", &u.LR},
		{"train/clip_low", &u.ClipLow}, {"train/clip_high", &u.ClipHigh}, {"train/clip_region", &u.ClipRegion},
		{"train/tokens", &u.Tokens}, {"train/sequences", &u.Sequences}, {"train/updates", &u.Updates},
		{"train/sample_logprob_diff", &u.SampleLogProbDiff}, {"time/train_s", &u.Seconds}}
}

func (u *Update) ratio() []figure {
	return []figure{{"train/sample_ratio_mean", &u.SampleRatioMean}, {"train/sample_ratio_max", &u.SampleRatioMax},
		{"train/sample_ratio_clipped", &u.SampleRatioClipped}}
}

// WithRatio marks the importance ratios as measured (the sampler
// reported its log-probs), so Put writes them.
func (u Update) WithRatio() Update { u.hasRatio = true; return u }

// Put adds the update's figures to a step's extra.
func (u Update) Put(extra map[string]float64) {
	putFigures(extra, u.figures())
	if u.hasRatio {
		putFigures(extra, u.ratio())
	}
}

// UpdateOf reads them back; ok is false for a step that trained nothing.
func UpdateOf(extra map[string]float64) (u Update, ok bool) {
	if _, trained := extra["train/loss"]; !trained {
		return u, false
	}
	readFigures(extra, u.figures())
	u.hasRatio = readFigures(extra, u.ratio())
	return u, true
}

// HasRatio reports whether the importance ratios were measured.
func (u Update) HasRatio() bool { return u.hasRatio }

// Sync is what pushing a step's adapter to a vLLM server took
// (weights_sync), and what retokenising text-only turns found.
type Sync struct {
	WeightsVersion float64 // the weights the loaded adapter holds: GRPO updates applied (as turns' weights_version)
	Seconds        float64
}

func (s *Sync) figures() []figure {
	return []figure{{"sync/weights_version", &s.WeightsVersion}, {"time/sync_s", &s.Seconds}}
}

// Put adds the push's figures to a step's extra.
func (s Sync) Put(extra map[string]float64) { putFigures(extra, s.figures()) }

// SyncOf reads them back.
func SyncOf(extra map[string]float64) (s Sync, ok bool) { return s, readFigures(extra, s.figures()) }

// Retokenized counts the text-only turns of a step retokenised, and
// those whose tokens did not match what the server sampled.
type Retokenized struct {
	Turns, Mismatched float64
}

func (r *Retokenized) figures() []figure {
	return []figure{{"train/retokenized_turns", &r.Turns}, {"train/retokenize_mismatch", &r.Mismatched}}
}

// Put adds the counts to a step's extra.
func (r Retokenized) Put(extra map[string]float64) { putFigures(extra, r.figures()) }

// RetokenizedOf reads them back.
func RetokenizedOf(extra map[string]float64) (r Retokenized, ok bool) {
	return r, readFigures(extra, r.figures())
}

// Ages are how many updates old the weights that sampled a step's
// episodes were (runs with max_off_policy_steps > 0).
type Ages struct {
	Mean, Max float64
	Dropped   float64         // episodes older than the limit, left out of training
	Count     map[int]float64 // episodes by age, as async/staleness_AGE
}

const agePrefix = "async/staleness_"

// Put adds the ages to a step's extra.
func (a Ages) Put(extra map[string]float64) {
	extra[agePrefix+"mean"] = a.Mean
	extra[agePrefix+"max"] = a.Max
	extra["async/dropped_stale"] = a.Dropped
	for _, age := range slices.Sorted(maps.Keys(a.Count)) {
		extra[fmt.Sprintf("%s%d", agePrefix, age)] = a.Count[age]
	}
}

// AgesOf reads them back.
func AgesOf(extra map[string]float64) (Ages, bool) {
	a := Ages{Count: map[int]float64{}}
	mean, ok := extra[agePrefix+"mean"]
	a.Mean, a.Max, a.Dropped = mean, extra[agePrefix+"max"], extra["async/dropped_stale"]
	for k, v := range extra {
		if rest, is := strings.CutPrefix(k, agePrefix); is {
			if age, err := strconv.Atoi(rest); err == nil {
				a.Count[age] = v
			}
		}
	}
	return a, ok
}

// Evaluation is one evaluation of the policy on held-out tasks during
// training (eval.every).
type Evaluation struct {
	RewardMean, RewardLow, RewardHigh float64 // mean reward and its 95% interval
	PassAt1, PassAtK, K               float64
	Tasks, Episodes, Errors           float64
	Seconds                           float64
}

func (e *Evaluation) figures() []figure {
	return []figure{{"eval/reward_mean", &e.RewardMean}, {"eval/reward_ci_low", &e.RewardLow}, {"eval/reward_ci_hi", &e.RewardHigh},
		{"eval/pass@1", &e.PassAt1}, {"eval/pass@k", &e.PassAtK}, {"eval/k", &e.K},
		{"eval/tasks", &e.Tasks}, {"eval/episodes", &e.Episodes}, {"eval/errors", &e.Errors}, {"time/eval_s", &e.Seconds}}
}

// Put adds the evaluation's figures to a step's extra.
func (e Evaluation) Put(extra map[string]float64) { putFigures(extra, e.figures()) }

// EvaluationOf reads them back.
func EvaluationOf(extra map[string]float64) (e Evaluation, ok bool) {
	return e, readFigures(extra, e.figures())
}

// Names of the figures the runner adds to every episode's metrics (and so,
// averaged over a step, to its extra as metric/NAME): the sandbox calls
// the episode made, those that hit their time limit, and their time.
const (
	SandboxExecs    = "sandbox_execs"
	SandboxTimeouts = "sandbox_timeouts"
	SandboxExecMS   = "sandbox_exec_ms"
)

// SandboxUse is what an episode's sandbox calls cost.
type SandboxUse struct {
	Execs, Timeouts, ExecMS float64
}

func (u *SandboxUse) figures(prefix string) []figure {
	return []figure{{prefix + SandboxExecs, &u.Execs}, {prefix + SandboxTimeouts, &u.Timeouts}, {prefix + SandboxExecMS, &u.ExecMS}}
}

// Put adds the use to an episode's metrics.
func (u SandboxUse) Put(metrics map[string]float64) { putFigures(metrics, u.figures("")) }

// SandboxUseOf reads an episode's use back.
func SandboxUseOf(metrics map[string]float64) (u SandboxUse, ok bool) {
	return u, readFigures(metrics, u.figures(""))
}

// MeanSandboxUseOf reads a step's mean use per episode from its extra.
func MeanSandboxUseOf(extra map[string]float64) (u SandboxUse, ok bool) {
	return u, readFigures(extra, u.figures(ExtraMetricPrefix))
}
