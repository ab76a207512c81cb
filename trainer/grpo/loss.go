package grpo

import (
	"fmt"
	"math"
)

// LossSeq is one sequence of a micro-batch as the loss sees it: the
// log-probs of its trained tokens only (the mask is implicit), under the
// current policy, the policy that sampled the batch ("old") and the
// frozen reference.
type LossSeq struct {
	LogP    []float64 // current policy, at Temperature
	OldLogP []float64 // same length; equal to LogP when num_iterations is 1
	RefLogP []float64 // same length; nil when Beta is 0
	// ISWeight optionally weights each token's policy loss (a constant,
	// no gradient): the sampling correction of SamplingWeights. nil is 1.
	ISWeight []float64
	Adv      float64
}

// SamplingWeights is TRL's importance-sampling correction for rollouts
// from another engine: per trained token, from the log-probs under the
// sampling weights as the trainer computes them (old) and as the sampler
// reported them (sampled),
//
//	token_*:    w_t = exp(old_t - sampled_t)
//	sequence_*: w_t = exp(Σ_t (old_t - sampled_t))   (a sum, as in TRL)
//
// then *_truncate clamps w to [clipMin, clipMax] and *_mask sets w to 0
// outside it. Mode none gives nil (weight 1).
func SamplingWeights(mode string, clipMin, clipMax float64, old, sampled []float64) []float64 {
	if mode == "" || mode == CorrectionNone {
		return nil
	}
	w := make([]float64, len(old))
	var sum float64
	for t := range old {
		w[t] = math.Exp(old[t] - sampled[t])
		sum += old[t] - sampled[t]
	}
	if mode == CorrectionSequenceTruncate || mode == CorrectionSequenceMask {
		for t := range w {
			w[t] = math.Exp(sum)
		}
	}
	for t, x := range w {
		switch mode {
		case CorrectionTokenTruncate, CorrectionSequenceTruncate:
			w[t] = min(max(x, clipMin), clipMax)
		default:
			if x < clipMin || x > clipMax {
				w[t] = 0
			}
		}
	}
	return w
}

// LossParams are the settings and batch-wide counts the loss of one
// micro-batch needs.
type LossParams struct {
	Type                string
	Epsilon             float64 // epsilon_low
	EpsilonHigh         float64 // the upper clip; cispo's ε_max
	Beta                float64
	Level               string  // token | sequence
	MaxCompletionLength int     // dr_grpo
	SAPOTempPos         float64 // sapo's gate temperature for A > 0
	SAPOTempNeg         float64 // ... for A <= 0
	// AccumSteps is the number of micro-batches in the optimiser step;
	// grpo, sapo, bnpo and dr_grpo divide each micro-batch's loss by it.
	AccumSteps int
	// NumItemsInBatch is the number of trained tokens in the whole
	// optimiser step; dapo and cispo divide by it.
	NumItemsInBatch int
}

// LossStats are sums over one micro-batch, for batch-wide metrics.
type LossStats struct {
	Loss     float64 // this micro-batch's share of the step's loss
	Tokens   int     // trained tokens
	KLSum    float64 // Σ k3 over trained tokens (Beta > 0)
	ClipLow  float64 // tokens (token level) or sequences (sequence level) clipped below with A < 0
	ClipHigh float64 // ... clipped above with A > 0
	ClipN    float64 // the denominator of those fractions: tokens or sequences

	sampledDiff float64 // Σ |sampling log-prob - log-prob| (filled by the trainer)
	sampledN    int
	ratioSum    float64 // Σ exp(log-prob - sampling log-prob)
	ratioMax    float64
	ratioOut    int // ratios outside [sampling_clip_min, sampling_clip_max]
}

func (s *LossStats) add(o LossStats) {
	s.Loss += o.Loss
	s.Tokens += o.Tokens
	s.KLSum += o.KLSum
	s.ClipLow += o.ClipLow
	s.ClipHigh += o.ClipHigh
	s.ClipN += o.ClipN
	s.sampledDiff += o.sampledDiff
	s.sampledN += o.sampledN
	s.ratioSum += o.ratioSum
	s.ratioMax = max(s.ratioMax, o.ratioMax)
	s.ratioOut += o.ratioOut
}

// Loss is TRL's GRPOTrainer._compute_loss for one micro-batch (one
// process), and its gradient: it returns the loss and writes
// dlogp[i][t] = ∂loss/∂LogP[i][t] (dlogp[i] must have len(LogP[i])).
//
// Per token, with log-ratio d = LogP-OldLogP (token level) or
// d_i = mean over the sequence's tokens (sequence level), ρ = exp(d), and
// sg() a constant (no gradient):
//
//	grpo, bnpo, dr_grpo, dapo:  ℓ = -min(ρ·A, clip(ρ, 1-ε, 1+ε_high)·A)
//	cispo:                      ℓ = -sg(min(ρ, ε_high))·A·LogP
//	sapo:                       ℓ = -(4/τ)·σ(τ·(ρ-1))·A,  τ = τ_pos if A > 0 else τ_neg
//
// then ℓ ← ℓ·w + β·(exp(ref-logp) - (ref-logp) - 1), where w is the
// token's ISWeight (1 without a sampling correction), and the
// micro-batch loss is Σ c·ℓ over trained tokens with weight c:
//
//	grpo, sapo    1 / (n_i · B · AccumSteps)      n_i = sequence's tokens (≥1), B = sequences here
//	bnpo          1 / (N · AccumSteps)            N = trained tokens here (≥1)
//	dr_grpo       1 / (B · MaxCompletionLength · AccumSteps)
//	dapo, cispo   1 / NumItemsInBatch (≥1)
//
// Gradients at ties (ρ exactly on a clip bound) follow PyTorch's
// autograd: the unclipped branch's gradient.
func Loss(p LossParams, seqs []LossSeq, dlogp [][]float64) (LossStats, error) {
	var st LossStats
	if len(dlogp) != len(seqs) {
		return st, fmt.Errorf("grpo: loss got %d gradient rows for %d sequences", len(dlogp), len(seqs))
	}
	if p.Level != LevelToken && p.Level != LevelSequence {
		return st, fmt.Errorf("grpo: unknown importance_sampling_level %q", p.Level)
	}
	B, N := len(seqs), 0
	for i, s := range seqs {
		n := len(s.LogP)
		if len(s.OldLogP) != n || (p.Beta != 0 && len(s.RefLogP) != n) || len(dlogp[i]) != n || (s.ISWeight != nil && len(s.ISWeight) != n) {
			return st, fmt.Errorf("grpo: loss sequence %d: lengths logp %d, old %d, ref %d, weights %d, grad %d differ",
				i, n, len(s.OldLogP), len(s.RefLogP), len(s.ISWeight), len(dlogp[i]))
		}
		N += n
	}
	st.Tokens = N
	accum := float64(max(1, p.AccumSteps))
	for i, s := range seqs {
		n := len(s.LogP)
		var c float64
		switch p.Type {
		case LossGRPO, LossSAPO:
			c = 1 / (float64(max(1, n)) * float64(B) * accum)
		case LossBNPO:
			c = 1 / (float64(max(1, N)) * accum)
		case LossDrGRPO:
			c = 1 / (float64(B) * float64(p.MaxCompletionLength) * accum)
		case LossDAPO, LossCISPO:
			c = 1 / float64(max(1, p.NumItemsInBatch))
		default:
			return st, fmt.Errorf("grpo: unknown loss_type %q", p.Type)
		}
		A := s.Adv
		isw := func(t int) float64 {
			if s.ISWeight == nil {
				return 1
			}
			return s.ISWeight[t]
		}
		// At sequence level one ratio serves every token: its policy
		// term repeats on each of the n tokens (each weighted by its
		// correction), and each token moves the mean log-ratio by 1/n.
		var seqRatio, seqL, seqD float64
		if p.Level == LevelSequence {
			var sum float64
			for t := range n {
				sum += s.LogP[t] - s.OldLogP[t]
			}
			seqRatio = sum / float64(max(1, n))
			if p.Type != LossCISPO {
				var wsum float64
				for t := range n {
					wsum += isw(t)
				}
				l, dl := p.policyTerm(seqRatio, A)
				seqL, seqD = l, dl*wsum/float64(max(1, n))
			}
			st.countClip(p, seqRatio, A)
		}
		for t := range n {
			var l, dl float64
			switch {
			case p.Type == LossCISPO:
				// The clipped ratio is a constant weight on log π.
				d := s.LogP[t] - s.OldLogP[t]
				if p.Level == LevelSequence {
					d = seqRatio
				} else {
					st.countClip(p, d, A)
				}
				wc := min(math.Exp(d), p.EpsilonHigh)
				l, dl = -wc*A*s.LogP[t]*isw(t), -wc*A*isw(t)
			case p.Level == LevelSequence:
				l, dl = seqL*isw(t), seqD
			default:
				d := s.LogP[t] - s.OldLogP[t]
				l, dl = p.policyTerm(d, A)
				l, dl = l*isw(t), dl*isw(t)
				st.countClip(p, d, A)
			}
			if p.Beta != 0 {
				x := s.RefLogP[t] - s.LogP[t]
				kl := math.Exp(x) - x - 1
				st.KLSum += kl
				l += p.Beta * kl
				dl += p.Beta * (1 - math.Exp(x))
			}
			st.Loss += c * l
			dlogp[i][t] = c * dl
		}
	}
	return st, nil
}

// policyTerm is the policy loss of one ratio ρ = exp(logRatio) with
// advantage A, for every loss type but cispo, and its derivative by log ρ.
func (p LossParams) policyTerm(logRatio, A float64) (l, dl float64) {
	rho := math.Exp(logRatio)
	if p.Type == LossSAPO {
		tau := p.SAPOTempNeg
		if A > 0 {
			tau = p.SAPOTempPos
		}
		g := sigmoid(tau * (rho - 1))
		// d/dlog ρ of (4/τ)·σ(τ(ρ-1)) is 4·σ·(1-σ)·ρ.
		return -4 / tau * g * A, -4 * g * (1 - g) * rho * A
	}
	lo, hi := 1-p.Epsilon, 1+p.EpsilonHigh
	c := min(max(rho, lo), hi)
	if rho*A <= c*A || (rho >= lo && rho <= hi) {
		return -rho * A, -rho * A
	}
	return -c * A, 0
}

// countClip counts one ratio (a token's, or a sequence's at sequence
// level) in the clip fractions TRL logs: for the clipped losses, below
// 1-ε with A < 0 and above 1+ε_high with A > 0; for cispo, above ε_high
// with A > 0 (cispo_clip_ratio, counted as high). sapo clips nothing.
func (st *LossStats) countClip(p LossParams, logRatio, A float64) {
	rho := math.Exp(logRatio)
	switch p.Type {
	case LossSAPO:
		return
	case LossCISPO:
		st.ClipHigh += b2f(rho > p.EpsilonHigh && A > 0)
	default:
		st.ClipLow += b2f(rho < 1-p.Epsilon && A < 0)
		st.ClipHigh += b2f(rho > 1+p.EpsilonHigh && A > 0)
	}
	st.ClipN++
}

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
