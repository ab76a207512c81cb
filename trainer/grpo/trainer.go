package grpo

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/rlhost/rlhost/trainer/model"
	"github.com/rlhost/rlhost/trainer/optim"
)

// Sample is one sampled episode: the full token sequence the model saw
// and produced (prompt, completion, and for multi-turn episodes every
// later turn, merged), and its reward.
type Sample struct {
	Tokens []int32
	// Trained marks the tokens the policy sampled (len(Tokens)); only
	// they carry loss. Prompt, system, user and tool tokens are false.
	// Trained[0] must be false: the first token has no context.
	Trained []bool
	// SampleLogProbs optionally holds, for trained tokens, the log-prob
	// each had when it was sampled (0 elsewhere). Only a
	// SamplingCorrection uses them in the loss; Stats.SampleLogProbDiff
	// reports how far the trainer's own log-probs are from them, which
	// checks the sampler's records.
	SampleLogProbs []float32
	// Reward is the sample's scalar reward, already summed over weighted
	// reward components; NaN marks an unscorable sample (advantage 0).
	Reward float64
	// Truncated is true when the completion hit its token budget; with
	// MaskTruncated its tokens are excluded from the loss.
	Truncated bool
}

// ErrTooLong is wrapped by Step and SFTStep errors for a sample longer
// than MaxSeqLen (up to its last trained token).
var ErrTooLong = errors.New("sample longer than max_seq_len")

// Stats describe one Step or SFTStep; the JSON names suit a metrics line
// (durations in nanoseconds).
type Stats struct {
	Loss float64 `json:"loss"` // the objective (mean over iterations)
	// KL and the clip fractions are, as TRL logs them, the mean over the
	// step's micro-batches (of every iteration) of each micro-batch's own
	// value.
	KL            float64 `json:"kl"`             // k3 KL to the reference per trained token (Beta > 0)
	ClipLow       float64 `json:"clip_low"`       // fraction of ratios clipped below with A < 0 (tokens, or sequences at sequence level)
	ClipHigh      float64 `json:"clip_high"`      // ... clipped above with A > 0 (cispo: above epsilon_high)
	ClipRegion    float64 `json:"clip_region"`    // either
	GradNorm      float64 `json:"grad_norm"`      // global L2 norm before clipping (mean over iterations)
	LR            float64 `json:"lr"`             // learning rate of the last update
	Updates       int     `json:"updates"`        // optimiser updates applied by this call
	OptimizerStep int     `json:"optimizer_step"` // optimiser updates applied in total
	Tokens        int     `json:"tokens"`         // trained tokens (after masking)
	Sequences     int     `json:"sequences"`
	Groups        int     `json:"groups"`
	ZeroStdGroups int     `json:"zero_std_groups"` // groups whose rewards were all equal: no gradient
	RewardMean    float64 `json:"reward_mean"`     // over scorable samples
	RewardStd     float64 `json:"reward_std"`
	// SampleLogProbDiff is the mean |SampleLogProbs - recomputed log-prob|
	// over trained tokens that carry a sampling log-prob (first iteration).
	SampleLogProbDiff float64 `json:"sample_logprob_diff"`
	// The importance ratio exp(trainer log-prob - sampling log-prob) over
	// the same tokens: its mean, its largest value, and the fraction
	// outside [sampling_clip_min, sampling_clip_max] (the tokens a
	// sampling correction would clip or mask). A wrong chat template or
	// dtype on the sampling server shows here first.
	SampleRatioMean    float64 `json:"sample_ratio_mean"`
	SampleRatioMax     float64 `json:"sample_ratio_max"`
	SampleRatioClipped float64 `json:"sample_ratio_clipped"`
	// Skipped says why an update was not applied (non-finite loss or
	// gradient); empty when every update was applied.
	Skipped string `json:"skipped,omitempty"`
	// Timings.
	ForwardBackward time.Duration `json:"forward_backward_ns"`
	Optimizer       time.Duration `json:"optimizer_ns"`
	Total           time.Duration `json:"total_ns"`
}

// Trainer owns a policy model, its optimiser state and the buffers of one
// training step, all allocated once in New. Step and SFTStep change the
// model's weights in place: nothing may read the model (generation,
// serving) while they run. A Trainer is used by one goroutine at a time.
type Trainer struct {
	cfg    Config
	m      *model.Model
	ad     *model.Adapter // the trained adapter (LoRA), or nil
	params []*model.Param // what the optimiser updates: m's or ad's
	ref    *model.Model   // frozen copy when Beta > 0 (nil with LoRA: the base is the reference)
	run    *model.Run     // MicroBatch × MaxSeqLen activations
	refRun *model.Run     // the reference's run when Beta > 0
	// runs are smaller runs sharing run's (or refRun's) memory, one per
	// micro-batch shape seen: a short micro-batch costs its own size.
	runs map[runKey]*model.Run
	opt  *optim.AdamW

	// Host-side buffers of one micro-batch.
	ids, tgt []int32
	lens     []int
	lp, dlp  []float32
}

// New builds a trainer for m: it allocates gradients, AdamW moments, the
// activations of a MicroBatch×MaxSeqLen run and, when Beta > 0, a frozen
// reference copy of m (and its run).
//
// With cfg.LoRA it trains a LoRA adapter instead: m's own adapter
// (Model.Adapter) when it has one of the same shape, else a new one with
// PEFT's initialisation, which New makes m's own so that generation from
// m samples the policy. Only the adapter gets gradients and AdamW moments;
// the reference of Beta > 0 is m without the adapter, so no copy is made.
func New(m *model.Model, cfg Config) (*Trainer, error) { return newTrainer(m, nil, nil, cfg) }

// newTrainer is New with the reference model (nil: a copy of m) and the
// adapter (nil: m's own or a new one) given.
func newTrainer(m, ref *model.Model, ad *model.Adapter, cfg Config) (*Trainer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("grpo: %w", err)
	}
	if mp := m.Cfg.MaxPositions; mp > 0 && cfg.MaxSeqLen > mp {
		return nil, fmt.Errorf("grpo: max_seq_len %d exceeds the model's max_position_embeddings %d", cfg.MaxSeqLen, mp)
	}
	t := &Trainer{cfg: cfg, m: m, runs: map[runKey]*model.Run{}}
	var err error
	if cfg.LoRA != nil {
		if err := t.initLoRA(ad); err != nil {
			return nil, err
		}
		return t, nil
	}
	if cfg.Beta != 0 {
		t.ref = ref
		if t.ref == nil {
			if t.ref, err = model.New(m.Device(), m.Cfg); err != nil {
				return nil, fmt.Errorf("grpo: reference model: %w", err)
			}
			copyWeights(t.ref, m)
		}
		if t.refRun, err = t.ref.NewRun(cfg.MicroBatch, cfg.MaxSeqLen); err != nil {
			return nil, fmt.Errorf("grpo: %w", err)
		}
	}
	m.AllocGrads()
	if t.run, err = m.NewRun(cfg.MicroBatch, cfg.MaxSeqLen); err != nil {
		return nil, fmt.Errorf("grpo: %w", err)
	}
	t.params = m.Params()
	if err := t.finish(); err != nil {
		return nil, err
	}
	return t, nil
}

// finish allocates the optimiser and host buffers.
func (t *Trainer) finish() error {
	var err error
	if t.opt, err = optim.NewAdamWFor(t.m.Device(), t.params, t.cfg.Optim()); err != nil {
		return fmt.Errorf("grpo: %w", err)
	}
	n := t.cfg.MicroBatch * t.cfg.MaxSeqLen
	t.ids, t.tgt, t.lens = make([]int32, n), make([]int32, n), make([]int, t.cfg.MicroBatch)
	t.lp, t.dlp = make([]float32, n), make([]float32, n)
	return nil
}

// initLoRA sets the trainer up to train adapter ad (nil: m's own, or a
// new one) on the frozen m.
func (t *Trainer) initLoRA(ad *model.Adapter) error {
	m, cfg := t.m, t.cfg
	if ad == nil {
		if own := m.Adapter(); own != nil && sameShape(own.Cfg, cfg.LoRA.AdapterConfig) {
			ad = own
		} else {
			var err error
			if ad, err = model.NewAdapter(m.Device(), m.Cfg, cfg.LoRA.AdapterConfig); err != nil {
				return fmt.Errorf("grpo: %w", err)
			}
			ad.Init(cfg.LoRA.Seed)
		}
	}
	// Dropout may differ from the adapter's saved setting; the shape may not.
	if !sameShape(ad.Cfg, cfg.LoRA.AdapterConfig) {
		return fmt.Errorf("grpo: adapter (rank %d, alpha %g, %v) does not match the lora settings (rank %d, alpha %g, %v)",
			ad.Cfg.Rank, ad.Cfg.Alpha, ad.Cfg.Targets, cfg.LoRA.Rank, cfg.LoRA.Alpha, cfg.LoRA.Targets)
	}
	ad.Cfg.Dropout = cfg.LoRA.Dropout
	var err error
	if cfg.Beta != 0 {
		// The reference is the bare base: its run is made while the model
		// has no adapter, so it holds no adapter or backward buffers.
		if err := m.SetAdapter(nil); err != nil {
			return fmt.Errorf("grpo: %w", err)
		}
		if t.refRun, err = m.NewRun(cfg.MicroBatch, cfg.MaxSeqLen); err != nil {
			return fmt.Errorf("grpo: %w", err)
		}
	}
	ad.AllocGrads()
	if err := m.SetAdapter(ad); err != nil {
		return fmt.Errorf("grpo: %w", err)
	}
	t.ad, t.params = ad, ad.Params()
	if t.run, err = m.NewRun(cfg.MicroBatch, cfg.MaxSeqLen); err != nil {
		return fmt.Errorf("grpo: %w", err)
	}
	t.run.SetTraining(true) // adapter dropout in the policy's forward passes
	return t.finish()
}

// sameShape reports whether adapters of a and b compute the same function
// of the same factors (dropout aside).
func sameShape(a, b model.AdapterConfig) bool {
	return a.Rank == b.Rank && a.Alpha == b.Alpha && a.RSLoRA == b.RSLoRA && slices.Equal(a.Targets, b.Targets)
}

// Adapter is the LoRA adapter being trained, or nil for full fine-tuning.
// It is also the model's own adapter (Model.Adapter).
func (t *Trainer) Adapter() *model.Adapter { return t.ad }

// zeroGrads clears the trained parameters' gradients.
func (t *Trainer) zeroGrads() {
	for _, p := range t.params {
		t.m.Device().Zero(p.G)
	}
}

func copyWeights(dst, src *model.Model) {
	sp := src.Params()
	for i, p := range dst.Params() {
		dst.Device().Copy(p.W, sp[i].W)
	}
}

// ResetReference makes the policy's current weights the reference of the
// KL term. A supervised warm-up calls it: TRL's reference is the model the
// trainer is given, which is the warmed-up one, not the random weights
// before it. Without a reference copy (beta 0, or LoRA, whose reference is
// the base without the adapter) it does nothing.
func (t *Trainer) ResetReference() {
	if t.ref != nil {
		copyWeights(t.ref, t.m)
	}
}

// Model is the policy being trained.
func (t *Trainer) Model() *model.Model { return t.m }

// Config is the trainer's configuration.
func (t *Trainer) Config() Config { return t.cfg }

// OptimizerStep is the number of optimiser updates applied so far.
func (t *Trainer) OptimizerStep() int { return t.opt.Step() }

// Step runs one GRPO step on a generation batch of groups (one group per
// prompt) and applies NumIterations optimiser updates to the policy.
func (t *Trainer) Step(ctx context.Context, groups [][]Sample) (Stats, error) {
	start := time.Now()
	st := Stats{Groups: len(groups)}

	// 1. Advantages: group-relative rewards, broadcast to trained tokens.
	rewards := make([][]float64, len(groups))
	for g, grp := range groups {
		for _, s := range grp {
			rewards[g] = append(rewards[g], s.Reward)
		}
	}
	adv, zeroStd, err := Advantages(rewards, t.cfg.ScaleRewards)
	if err != nil {
		return st, err
	}
	st.ZeroStdGroups = zeroStd
	st.RewardMean, st.RewardStd = rewardStats(rewards)
	seqs, err := t.packGroups(groups, adv)
	if err != nil {
		return st, err
	}
	for _, s := range seqs {
		st.Tokens += len(s.pos)
	}
	st.Sequences = len(seqs)
	if st.Tokens == 0 {
		// Nothing to learn from; AdamW would still move the weights by
		// momentum, so no update is applied.
		st.Skipped = "no trained tokens in the batch"
		st.OptimizerStep = t.opt.Step()
		st.Total = time.Since(start)
		return st, nil
	}
	mbs := t.microBatches(len(seqs))
	lp := LossParams{Type: t.cfg.LossType, Epsilon: t.cfg.Epsilon, EpsilonHigh: t.cfg.epsHigh(),
		Beta: t.cfg.Beta, Level: t.cfg.ImportanceSampling, MaxCompletionLength: t.cfg.MaxCompletionLength,
		SAPOTempPos: t.cfg.SAPOTemperaturePos, SAPOTempNeg: t.cfg.SAPOTemperatureNeg,
		AccumSteps: len(mbs), NumItemsInBatch: st.Tokens}

	var sum LossStats
	var per perMicroBatch
	for it := range t.cfg.NumIterations {
		t.zeroGrads()
		var loss float64
		fb := time.Now()
		for _, mb := range mbs {
			if err := ctx.Err(); err != nil {
				return st, fmt.Errorf("grpo: step: %w", err)
			}
			// 2-4. Forward, loss and dloss/dlogp, backward.
			mst, err := t.microStep(seqs, mb, lp, it == 0)
			if err != nil {
				return st, err
			}
			loss += mst.Loss
			sum.add(mst)
			per.add(mst)
		}
		st.ForwardBackward += time.Since(fb)
		// 5. Clip, guard against NaN/Inf, update.
		if reason := t.update(&st, loss); reason != "" {
			st.Skipped = fmt.Sprintf("iteration %d: %s", it, reason)
			break
		}
	}
	// 6. Stats.
	st.summarise(sum, per)
	st.OptimizerStep = t.opt.Step()
	st.Total = time.Since(start)
	return st, nil
}

// perMicroBatch sums each micro-batch's own KL and clip fractions: TRL
// logs the mean of these per-micro-batch values, not a token mean over
// the step.
type perMicroBatch struct {
	n                  int
	kl, low, high, reg float64
}

func (p *perMicroBatch) add(s LossStats) {
	p.n++
	p.kl += s.KLSum / float64(max(1, s.Tokens))
	clipN := max(1, s.ClipN)
	p.low += s.ClipLow / clipN
	p.high += s.ClipHigh / clipN
	p.reg += (s.ClipLow + s.ClipHigh) / clipN // exclusive: A < 0 vs A > 0
}

// packGroups prepares every sample of groups for the model and gives each
// its advantage.
func (t *Trainer) packGroups(groups [][]Sample, adv [][]float64) ([]*seq, error) {
	var seqs []*seq
	for g, grp := range groups {
		for i := range grp {
			s, err := t.pack(&grp[i], fmt.Sprintf("group %d sample %d", g, i), t.cfg.MaskTruncated)
			if err != nil {
				return nil, err
			}
			s.adv = adv[g][i]
			seqs = append(seqs, s)
		}
	}
	return seqs, nil
}

// summarise turns the sums over a step's iterations into means: loss and
// gradient norm over the applied updates, KL and clip fractions over every
// micro-batch of every iteration, sampling statistics over trained tokens.
func (st *Stats) summarise(sum LossStats, per perMicroBatch) {
	if st.Updates > 0 {
		st.GradNorm /= float64(st.Updates)
		st.Loss /= float64(st.Updates)
	}
	if per.n > 0 {
		n := float64(per.n)
		st.KL, st.ClipLow, st.ClipHigh, st.ClipRegion = per.kl/n, per.low/n, per.high/n, per.reg/n
	}
	if sum.sampledN > 0 {
		st.SampleLogProbDiff = sum.sampledDiff / float64(sum.sampledN)
		st.SampleRatioMean = sum.ratioSum / float64(sum.sampledN)
		st.SampleRatioMax = sum.ratioMax
		st.SampleRatioClipped = float64(sum.ratioOut) / float64(sum.sampledN)
	}
}

// microStep runs one micro-batch: the forward pass and the log-probs of
// its trained tokens at the sampling temperature, the loss and its
// gradient, and the backward pass that adds to the parameter gradients.
// On the first iteration the log-probs are also kept as the "old" policy's
// (the batch was sampled with these weights) and the reference's are
// computed.
func (t *Trainer) microStep(seqs []*seq, mb []int, p LossParams, first bool) (LossStats, error) {
	if tokensIn(seqs, mb) == 0 {
		// Nothing to run (masked or prompt-only samples); the loss still
		// counts these sequences, with zero terms.
		return Loss(p, make([]LossSeq, len(mb)), make([][]float64, len(mb)))
	}
	run, err := t.forward(t.run, seqs, mb, float32(t.cfg.Temperature), func(s *seq, k int, v float64) {
		s.logp[k] = v
		if first {
			s.old[k] = v
		}
	})
	if err != nil {
		return LossStats{}, err
	}
	if first && t.refRun != nil {
		if _, err := t.forward(t.refRun, seqs, mb, float32(t.cfg.Temperature), func(s *seq, k int, v float64) { s.ref[k] = v }); err != nil {
			return LossStats{}, err
		}
	}
	ls := make([]LossSeq, len(mb))
	grads := make([][]float64, len(mb))
	for j, i := range mb {
		s := seqs[i]
		if first && len(s.sample) > 0 {
			sampled := make([]float64, len(s.pos))
			for k, pos := range s.pos {
				sampled[k] = float64(s.sample[pos])
			}
			s.isw = SamplingWeights(t.cfg.SamplingCorrection, t.cfg.SamplingClipMin, t.cfg.clipMax(), s.old, sampled)
		}
		ls[j] = LossSeq{LogP: s.logp, OldLogP: s.old, Adv: s.adv, ISWeight: s.isw}
		if t.refRun != nil {
			ls[j].RefLogP = s.ref
		}
		grads[j] = s.grad
	}
	st, err := Loss(p, ls, grads)
	if err != nil {
		return st, err
	}
	if first {
		for _, i := range mb {
			s := seqs[i]
			for k, pos := range s.pos {
				if len(s.sample) > 0 {
					st.sampledDiff += math.Abs(float64(s.sample[pos]) - s.logp[k])
					st.sampledN++
					r := math.Exp(s.logp[k] - float64(s.sample[pos]))
					st.ratioSum += r
					st.ratioMax = max(st.ratioMax, r)
					if r < t.cfg.SamplingClipMin || r > t.cfg.clipMax() {
						st.ratioOut++
					}
				}
			}
		}
	}
	return st, t.backward(run, seqs, mb)
}

// SFTStep is one supervised step: the mean negative log-likelihood (at
// temperature 1) of all trained tokens of samples, one optimiser update.
// Rewards, advantages and Truncated are ignored.
func (t *Trainer) SFTStep(ctx context.Context, samples []Sample) (Stats, error) {
	start := time.Now()
	st := Stats{Sequences: len(samples)}
	var seqs []*seq
	for i := range samples {
		s, err := t.pack(&samples[i], fmt.Sprintf("sample %d", i), false)
		if err != nil {
			return st, err
		}
		seqs = append(seqs, s)
		st.Tokens += len(s.pos)
	}
	if st.Tokens == 0 {
		st.Skipped = "no trained tokens in the batch"
		st.OptimizerStep = t.opt.Step()
		st.Total = time.Since(start)
		return st, nil
	}
	t.zeroGrads()
	var loss float64
	w := 1 / float64(max(1, st.Tokens))
	fb := time.Now()
	for _, mb := range t.microBatches(len(seqs)) {
		if err := ctx.Err(); err != nil {
			return st, fmt.Errorf("grpo: sft step: %w", err)
		}
		if tokensIn(seqs, mb) == 0 {
			continue
		}
		run, err := t.forward(t.run, seqs, mb, 1, func(s *seq, k int, v float64) {
			loss -= w * v
			s.grad[k] = -w
		})
		if err != nil {
			return st, err
		}
		if err := t.backward(run, seqs, mb); err != nil {
			return st, err
		}
	}
	st.ForwardBackward = time.Since(fb)
	if reason := t.update(&st, loss); reason != "" {
		st.Skipped = reason
	}
	st.OptimizerStep = t.opt.Step()
	st.Total = time.Since(start)
	return st, nil
}

// update clips the gradients and applies one AdamW step, unless the loss
// or the gradient norm is not finite: then it clears the gradients and
// returns why. The optimiser step count (and so the schedule) only
// advances on applied updates.
func (t *Trainer) update(st *Stats, loss float64) string {
	opt := time.Now()
	defer func() { st.Optimizer += time.Since(opt) }()
	norm := optim.ClipGrads(t.m.Device(), t.params, t.cfg.MaxGradNorm)
	switch {
	case !finite(loss):
		t.zeroGrads()
		return fmt.Sprintf("loss is %g", loss)
	case !finite(norm):
		t.zeroGrads()
		return fmt.Sprintf("gradient norm is %g", norm)
	}
	st.LR = t.opt.Update()
	st.Updates++
	st.Loss += loss
	st.GradNorm += norm
	return ""
}

// seq is a sample prepared for the model: its tokens up to the last
// trained one, the positions of its trained tokens, and per trained token
// the current, old and reference log-probs and the loss gradient.
type seq struct {
	tokens []int32
	pos    []int // positions p ≥ 1 of trained tokens; row p-1 predicts them
	sample []float32
	adv    float64
	logp   []float64
	old    []float64
	ref    []float64
	grad   []float64
	isw    []float64 // sampling-correction weights (nil: none)
}

func (t *Trainer) pack(s *Sample, name string, maskTruncated bool) (*seq, error) {
	if len(s.Trained) != len(s.Tokens) {
		return nil, fmt.Errorf("grpo: %s: %d trained flags for %d tokens", name, len(s.Trained), len(s.Tokens))
	}
	if n := len(s.SampleLogProbs); n != 0 && n != len(s.Tokens) {
		return nil, fmt.Errorf("grpo: %s: %d sampling log-probs for %d tokens", name, n, len(s.Tokens))
	}
	if len(s.Trained) > 0 && s.Trained[0] {
		return nil, fmt.Errorf("grpo: %s: token 0 is marked trained but has no context", name)
	}
	V := int32(t.m.Cfg.VocabSize)
	for i, id := range s.Tokens {
		if id < 0 || id >= V {
			return nil, fmt.Errorf("grpo: %s: token %d at position %d outside vocabulary of %d", name, id, i, V)
		}
	}
	q := &seq{sample: s.SampleLogProbs}
	if !(maskTruncated && s.Truncated) {
		for p, tr := range s.Trained {
			if tr {
				q.pos = append(q.pos, p)
			}
		}
	}
	if len(q.pos) > 0 && len(s.SampleLogProbs) == 0 && t.cfg.SamplingCorrection != "" && t.cfg.SamplingCorrection != CorrectionNone {
		return nil, fmt.Errorf("grpo: %s: sampling_correction %s needs the sampling log-probs of its tokens", name, t.cfg.SamplingCorrection)
	}
	if len(q.pos) > 0 {
		n := q.pos[len(q.pos)-1] + 1 // later tokens cannot affect the loss
		if n > t.cfg.MaxSeqLen {
			return nil, fmt.Errorf("grpo: %s: %d tokens up to its last trained one: %w (%d)", name, n, ErrTooLong, t.cfg.MaxSeqLen)
		}
		q.tokens = s.Tokens[:n]
	}
	k := len(q.pos)
	buf := make([]float64, 4*k)
	q.logp, q.old, q.ref, q.grad = buf[:k], buf[k:2*k], buf[2*k:3*k], buf[3*k:]
	return q, nil
}

// microBatches splits n sequences, in order, into chunks of MicroBatch.
func (t *Trainer) microBatches(n int) [][]int {
	var out [][]int
	for lo := 0; lo < n; lo += t.cfg.MicroBatch {
		var mb []int
		for i := lo; i < min(n, lo+t.cfg.MicroBatch); i++ {
			mb = append(mb, i)
		}
		out = append(out, mb)
	}
	return out
}

// forward runs the micro-batch mb through a run taken from r, just big
// enough for it (sequences padded to a multiple of 16 tokens), hands each
// trained token's log-prob at temperature temp to set, and returns that
// run for the backward pass.
func (t *Trainer) forward(r *model.Run, seqs []*seq, mb []int, temp float32, set func(s *seq, k int, v float64)) (*model.Run, error) {
	T := 0
	for _, i := range mb {
		T = max(T, len(seqs[i].tokens))
	}
	T = min(t.cfg.MaxSeqLen, max(1, (T+15)/16*16))
	run, err := t.within(r, len(mb), T)
	if err != nil {
		return nil, fmt.Errorf("grpo: %w", err)
	}
	n := len(mb) * T
	ids, tgt, lens, lp := t.ids[:n], t.tgt[:n], t.lens[:len(mb)], t.lp[:n]
	clear(ids)
	for i := range tgt {
		tgt[i] = -1
	}
	for b, i := range mb {
		s := seqs[i]
		copy(ids[b*T:], s.tokens)
		lens[b] = len(s.tokens)
		for _, p := range s.pos {
			tgt[b*T+p-1] = s.tokens[p]
		}
	}
	if err := run.Forward(ids, lens); err != nil {
		return nil, fmt.Errorf("grpo: forward: %w", err)
	}
	if err := run.LogProbs(tgt, temp, lp); err != nil {
		return nil, fmt.Errorf("grpo: log-probs: %w", err)
	}
	for b, i := range mb {
		s := seqs[i]
		for k, p := range s.pos {
			set(s, k, float64(lp[b*T+p-1]))
		}
	}
	return run, nil
}

// within returns the B×T run sharing r's memory, kept once made.
func (t *Trainer) within(r *model.Run, B, T int) (*model.Run, error) {
	key := runKey{r, B, T}
	if run, ok := t.runs[key]; ok {
		return run, nil
	}
	run, err := r.Within(B, T)
	if err != nil {
		return nil, err
	}
	t.runs[key] = run
	return run, nil
}

type runKey struct {
	parent *model.Run
	B, T   int
}

// backward accumulates the gradients of the micro-batch's loss, given
// each sequence's dloss/dlogp, into the policy's parameter gradients,
// through the run of its forward pass.
func (t *Trainer) backward(run *model.Run, seqs []*seq, mb []int) error {
	T := run.T
	dlp := t.dlp[:len(mb)*T]
	clear(dlp)
	for b, i := range mb {
		s := seqs[i]
		for k, p := range s.pos {
			dlp[b*T+p-1] = float32(s.grad[k])
		}
	}
	if err := run.Backward(dlp); err != nil {
		return fmt.Errorf("grpo: backward: %w", err)
	}
	return nil
}

func tokensIn(seqs []*seq, mb []int) int {
	n := 0
	for _, i := range mb {
		n += len(seqs[i].pos)
	}
	return n
}

func rewardStats(rewards [][]float64) (mean, std float64) {
	var all []float64
	for _, g := range rewards {
		all = append(all, g...)
	}
	mean, std = meanStd(all)
	return nanToZero(mean), nanToZero(std)
}
