// Package optim is the trainer's optimiser: AdamW moment buffers for every
// trained parameter (a model's, or only a LoRA adapter's), the
// learning-rate schedule of Hugging Face's Trainer (constant, linear or
// cosine after a linear warm-up), and global gradient-norm clipping as
// torch.nn.utils.clip_grad_norm_ does it.
//
// It deliberately computes no loss and runs no model: a caller fills the
// gradients (model.Run.Backward), then calls Clip and Update once per
// optimiser step. Its state (moments, step) is saved and restored exactly
// by the caller's checkpoint code through Moments and SetStep.
package optim

import (
	"fmt"
	"math"

	"github.com/rlhost/rlhost/trainer/compute"
	"github.com/rlhost/rlhost/trainer/model"
)

// Schedule names.
const (
	Constant = "constant"
	Linear   = "linear"
	Cosine   = "cosine"
)

// Config holds the optimiser's hyper-parameters. Names and defaults
// follow transformers.TrainingArguments.
type Config struct {
	LR          float64 // peak learning rate
	Beta1       float64 // default 0.9
	Beta2       float64 // default 0.999
	Eps         float64 // default 1e-8
	WeightDecay float64 // decoupled; applied to matrices only, as the HF Trainer does
	Schedule    string  // constant | linear | cosine
	WarmupSteps int     // linear ramp from 0 over this many updates
	TotalSteps  int     // linear and cosine decay to 0 at this update; required by them
}

// Validate checks the settings; errors name the setting.
func (c Config) Validate() error {
	switch {
	case !(c.LR >= 0) || math.IsInf(c.LR, 0):
		return fmt.Errorf("learning_rate %g must be a finite number >= 0", c.LR)
	case !(c.Beta1 >= 0 && c.Beta1 < 1):
		return fmt.Errorf("adam_beta1 %g must be in [0,1)", c.Beta1)
	case !(c.Beta2 >= 0 && c.Beta2 < 1):
		return fmt.Errorf("adam_beta2 %g must be in [0,1)", c.Beta2)
	case !(c.Eps > 0):
		return fmt.Errorf("adam_epsilon %g must be positive", c.Eps)
	case !(c.WeightDecay >= 0) || math.IsInf(c.WeightDecay, 0):
		return fmt.Errorf("weight_decay %g must be a finite number >= 0", c.WeightDecay)
	case c.WarmupSteps < 0:
		return fmt.Errorf("warmup_steps %d must be >= 0", c.WarmupSteps)
	}
	switch c.Schedule {
	case Constant:
	case Linear, Cosine:
		if c.TotalSteps <= 0 {
			return fmt.Errorf("lr_scheduler %q needs total steps > 0 (got %d)", c.Schedule, c.TotalSteps)
		}
	default:
		return fmt.Errorf("lr_scheduler %q is not one of constant, linear, cosine", c.Schedule)
	}
	return nil
}

// LRAt is the learning rate of update k (0 for the first update), the
// LambdaLR multipliers of transformers' get_constant_schedule_with_warmup,
// get_linear_schedule_with_warmup and get_cosine_schedule_with_warmup.
// As there, the first update of a warm-up runs at learning rate 0; past
// TotalSteps linear and cosine stay at 0.
func (c Config) LRAt(k int) float64 {
	if k < c.WarmupSteps {
		return c.LR * float64(k) / float64(max(1, c.WarmupSteps))
	}
	switch c.Schedule {
	case Linear:
		return c.LR * max(0, float64(c.TotalSteps-k)/float64(max(1, c.TotalSteps-c.WarmupSteps)))
	case Cosine:
		// Past TotalSteps the rate stays 0 (transformers would climb again).
		p := min(1, float64(k-c.WarmupSteps)/float64(max(1, c.TotalSteps-c.WarmupSteps)))
		return c.LR * max(0, 0.5*(1+math.Cos(math.Pi*p)))
	}
	return c.LR
}

// AdamW holds the moments of every trained parameter: all of a model's,
// or only a LoRA adapter's (the frozen base then has none).
type AdamW struct {
	cfg    Config
	be     compute.Device
	params []*model.Param
	mom    []compute.Tensor
	vel    []compute.Tensor
	decay  []bool
	step   int // updates applied so far
}

// NewAdamW allocates zeroed moments for every parameter of m (8 bytes per
// parameter in float32).
func NewAdamW(m *model.Model, c Config) (*AdamW, error) {
	return NewAdamWFor(m.Device(), m.Params(), c)
}

// NewAdamWFor allocates zeroed moments for params, which live on be and
// have gradients (a LoRA adapter's factors, say).
func NewAdamWFor(be compute.Device, params []*model.Param, c Config) (*AdamW, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("optim: %w", err)
	}
	a := &AdamW{cfg: c, be: be, params: params}
	for _, p := range params {
		a.mom = append(a.mom, be.Alloc(p.Len()))
		a.vel = append(a.vel, be.Alloc(p.Len()))
		// The HF Trainer exempts biases and norm weights from decay; in
		// this model those are exactly the 1-D parameters.
		a.decay = append(a.decay, len(p.Shape) >= 2)
	}
	return a, nil
}

// Step is the number of updates applied so far.
func (a *AdamW) Step() int { return a.step }

// SetStep sets the update count (when restoring a checkpoint).
func (a *AdamW) SetStep(k int) { a.step = k }

// Config returns the hyper-parameters.
func (a *AdamW) Config() Config { return a.cfg }

// NextLR is the learning rate the next Update will use.
func (a *AdamW) NextLR() float64 { return a.cfg.LRAt(a.step) }

// Moments returns the first and second moment tensors, in the order of
// the parameters given to the constructor.
func (a *AdamW) Moments() (m, v []compute.Tensor) { return a.mom, a.vel }

// ClipGradNorm scales every gradient by maxNorm/(norm+1e-6) when the
// global L2 norm exceeds maxNorm (maxNorm <= 0 disables clipping), and
// returns the norm before clipping, as clip_grad_norm_ does.
func ClipGradNorm(m *model.Model, maxNorm float64) float64 {
	return ClipGrads(m.Device(), m.Params(), maxNorm)
}

// ClipGrads is ClipGradNorm over params (those without a gradient are
// skipped).
func ClipGrads(be compute.Device, params []*model.Param, maxNorm float64) float64 {
	var s float64
	for _, p := range params {
		if p.G != nil {
			s += be.SumSquares(p.G)
		}
	}
	norm := math.Sqrt(s)
	if maxNorm > 0 && !math.IsNaN(norm) && !math.IsInf(norm, 0) {
		if c := maxNorm / (norm + 1e-6); c < 1 {
			for _, p := range params {
				if p.G != nil {
					be.Scale(p.G, float32(c))
				}
			}
		}
	}
	return norm
}

// Update applies one AdamW step with the scheduled learning rate to every
// parameter and returns that learning rate.
func (a *AdamW) Update() float64 {
	lr := a.cfg.LRAt(a.step)
	a.step++
	be := a.be
	for i, p := range a.params {
		wd := 0.0
		if a.decay[i] {
			wd = a.cfg.WeightDecay
		}
		be.AdamW(p.W, p.G, a.mom[i], a.vel[i], compute.AdamWParams{
			LR: float32(lr), Beta1: float32(a.cfg.Beta1), Beta2: float32(a.cfg.Beta2),
			Eps: float32(a.cfg.Eps), WeightDecay: float32(wd), Step: a.step,
		})
	}
	return lr
}
