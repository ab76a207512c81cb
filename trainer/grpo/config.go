package grpo

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/rlhost/rlhost/trainer/model"
	"github.com/rlhost/rlhost/trainer/optim"
)

// LoRA configures training a LoRA adapter on a frozen base model: PEFT's
// LoraConfig settings, and the seed of the adapter's initial A factors.
type LoRA struct {
	model.AdapterConfig
	Seed uint64 `json:"seed"`
}

// Loss types (TRL's loss_type).
const (
	LossGRPO   = "grpo"
	LossBNPO   = "bnpo"
	LossDrGRPO = "dr_grpo"
	LossDAPO   = "dapo"
	LossCISPO  = "cispo"
	LossSAPO   = "sapo"
)

// LossTypes lists the loss types Validate accepts.
var LossTypes = []string{LossGRPO, LossBNPO, LossDrGRPO, LossDAPO, LossCISPO, LossSAPO}

// Importance-sampling levels (TRL's importance_sampling_level).
const (
	LevelToken    = "token"
	LevelSequence = "sequence"
)

// Sampling corrections (TRL's vllm_importance_sampling_mode, and none).
const (
	CorrectionNone             = "none"
	CorrectionTokenTruncate    = "token_truncate"
	CorrectionTokenMask        = "token_mask"
	CorrectionSequenceTruncate = "sequence_truncate"
	CorrectionSequenceMask     = "sequence_mask"
)

// Reward scalings (TRL's scale_rewards).
const (
	ScaleGroup = "group"
	ScaleBatch = "batch"
	ScaleNone  = "none"
)

// Config is every GRPO and optimiser setting. JSON names are TRL's
// GRPOConfig and transformers' TrainingArguments names where those exist;
// DefaultConfig gives the defaults.
type Config struct {
	LossType    string  `json:"loss_type"`    // grpo | bnpo | dr_grpo | dapo | cispo | sapo
	Epsilon     float64 `json:"epsilon"`      // lower clip, ratio >= 1-Epsilon
	EpsilonHigh float64 `json:"epsilon_high"` // upper clip, ratio <= 1+EpsilonHigh (cispo: ratio <= EpsilonHigh); 0 means Epsilon
	// SAPOTemperaturePos and SAPOTemperatureNeg are the temperatures of
	// sapo's soft gate for tokens with positive and with non-positive
	// advantage.
	SAPOTemperaturePos float64 `json:"sapo_temperature_pos"`
	SAPOTemperatureNeg float64 `json:"sapo_temperature_neg"`
	Beta               float64 `json:"beta"`                      // KL weight; 0 holds no reference model
	ImportanceSampling string  `json:"importance_sampling_level"` // token | sequence
	ScaleRewards       string  `json:"scale_rewards"`             // group | batch | none
	NumIterations      int     `json:"num_iterations"`            // updates per batch
	MaskTruncated      bool    `json:"mask_truncated_completions"`
	Temperature        float64 `json:"temperature"` // log-probs of logits/T, as sampled
	// MaxCompletionLength is max_completion_length, the constant dr_grpo
	// divides by (per sequence).
	MaxCompletionLength int `json:"max_completion_length"`
	// SamplingCorrection weights each token's policy loss by the ratio of
	// the trainer's to the sampler's probability, for rollouts sampled by
	// another engine (TRL's vllm_importance_sampling_mode, applied when
	// vllm_importance_sampling_correction is on): none | token_truncate |
	// token_mask | sequence_truncate | sequence_mask. It needs
	// Sample.SampleLogProbs.
	SamplingCorrection string `json:"sampling_correction"`
	// SamplingClipMax is vllm_importance_sampling_clip_max; nil (TRL's
	// None) is no upper bound.
	SamplingClipMax *float64 `json:"sampling_clip_max"`
	SamplingClipMin float64  `json:"sampling_clip_min"` // vllm_importance_sampling_clip_min; 0 is no lower bound

	// Optimiser (transformers.TrainingArguments names).
	LR          float64 `json:"learning_rate"`
	Schedule    string  `json:"lr_scheduler_type"` // constant | linear | cosine
	WarmupSteps int     `json:"warmup_steps"`      // optimiser updates
	TotalSteps  int     `json:"total_steps"`       // updates over the whole run; linear and cosine decay to 0 there
	Beta1       float64 `json:"adam_beta1"`
	Beta2       float64 `json:"adam_beta2"`
	AdamEps     float64 `json:"adam_epsilon"`
	WeightDecay float64 `json:"weight_decay"`  // matrices only
	MaxGradNorm float64 `json:"max_grad_norm"` // 0 disables clipping

	// MicroBatch is the number of sequences per forward/backward pass
	// (per_device_train_batch_size); it bounds activation memory.
	MicroBatch int `json:"micro_batch"`
	// MaxSeqLen is the longest sequence (prompt and completion, all turns)
	// a step accepts; activations are allocated for MicroBatch×MaxSeqLen.
	MaxSeqLen int `json:"max_seq_len"`

	// LoRA, when set, trains only a LoRA adapter: the base weights are
	// frozen (no gradients, no optimiser state) and the reference model
	// of beta > 0 is the base itself.
	LoRA *LoRA `json:"lora,omitempty"`
}

// DefaultConfig returns TRL's GRPOConfig defaults where they exist
// (learning rate 1e-6, dapo, epsilon 0.2, beta 0, token-level, group
// scaling, one iteration, max_completion_length 512, clipping at 1.0,
// sapo temperatures 1 and 1.05, sampling clip max 3), no sampling
// correction (the trainer's own server samples with the weights being
// trained), and a micro-batch of 1 sequence of up to 1024 tokens. The
// schedule is constant: transformers' default, linear, decays to 0 at
// TotalSteps, which a Config does not know until its caller sets it. The
// trainer block of a job, which knows the run's length, defaults to
// linear.
func DefaultConfig() Config {
	return Config{
		LossType: LossDAPO, Epsilon: 0.2, ImportanceSampling: LevelToken,
		SAPOTemperaturePos: 1, SAPOTemperatureNeg: 1.05,
		ScaleRewards: ScaleGroup, NumIterations: 1, Temperature: 1,
		MaxCompletionLength: 512,
		SamplingCorrection:  CorrectionNone, SamplingClipMax: ptr(3.0),
		LR: 1e-6, Schedule: optim.Constant,
		Beta1: 0.9, Beta2: 0.999, AdamEps: 1e-8, MaxGradNorm: 1,
		MicroBatch: 1, MaxSeqLen: 1024,
	}
}

func ptr[T any](v T) *T { return &v }

// clipMax is the sampling correction's upper bound (+Inf for none).
func (c Config) clipMax() float64 {
	if c.SamplingClipMax == nil {
		return math.Inf(1)
	}
	return *c.SamplingClipMax
}

// epsHigh is the effective upper clip.
func (c Config) epsHigh() float64 {
	if c.EpsilonHigh == 0 {
		return c.Epsilon
	}
	return c.EpsilonHigh
}

// Optim is the optimiser part of c.
func (c Config) Optim() optim.Config {
	return optim.Config{LR: c.LR, Beta1: c.Beta1, Beta2: c.Beta2, Eps: c.AdamEps,
		WeightDecay: c.WeightDecay, Schedule: c.Schedule, WarmupSteps: c.WarmupSteps, TotalSteps: c.TotalSteps}
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// Validate checks every setting; an error names the setting (TRL name).
func (c Config) Validate() error {
	if !slices.Contains(LossTypes, c.LossType) {
		return fmt.Errorf("loss_type %q is not one of %s", c.LossType, strings.Join(LossTypes, ", "))
	}
	switch c.ImportanceSampling {
	case LevelToken, LevelSequence:
	default:
		return fmt.Errorf("importance_sampling_level %q is not one of token, sequence", c.ImportanceSampling)
	}
	switch c.ScaleRewards {
	case ScaleGroup, ScaleBatch, ScaleNone:
	default:
		return fmt.Errorf("scale_rewards %q is not one of group, batch, none", c.ScaleRewards)
	}
	switch c.SamplingCorrection {
	case "", CorrectionNone:
	case CorrectionTokenTruncate, CorrectionTokenMask, CorrectionSequenceTruncate, CorrectionSequenceMask:
		if m := c.SamplingClipMax; m != nil && (!(*m > 0) || !finite(*m)) {
			return fmt.Errorf("sampling_clip_max %g must be positive with sampling_correction %s (or null: no upper bound)", *m, c.SamplingCorrection)
		}
		if !(c.SamplingClipMin >= 0 && c.SamplingClipMin <= c.clipMax()) || math.IsInf(c.SamplingClipMin, 0) {
			return fmt.Errorf("sampling_clip_min %g must be in [0, sampling_clip_max]", c.SamplingClipMin)
		}
		if c.SamplingClipMax == nil && c.SamplingClipMin == 0 &&
			(c.SamplingCorrection == CorrectionTokenTruncate || c.SamplingCorrection == CorrectionSequenceTruncate) {
			return fmt.Errorf("sampling_clip_max is null and sampling_clip_min 0: sampling_correction %s needs at least one bound", c.SamplingCorrection)
		}
	default:
		return fmt.Errorf("sampling_correction %q is not one of none, token_truncate, token_mask, sequence_truncate, sequence_mask", c.SamplingCorrection)
	}
	switch {
	case !(c.Epsilon >= 0 && c.Epsilon < 1):
		return fmt.Errorf("epsilon %g must be in [0,1)", c.Epsilon)
	case !(c.EpsilonHigh >= 0) || !finite(c.EpsilonHigh):
		return fmt.Errorf("epsilon_high %g must be a finite number >= 0", c.EpsilonHigh)
	case !(c.Beta >= 0) || !finite(c.Beta):
		return fmt.Errorf("beta %g must be a finite number >= 0", c.Beta)
	case c.LossType == LossSAPO && (!(c.SAPOTemperaturePos > 0) || !finite(c.SAPOTemperaturePos)):
		return fmt.Errorf("sapo_temperature_pos %g must be positive for loss_type sapo", c.SAPOTemperaturePos)
	case c.LossType == LossSAPO && (!(c.SAPOTemperatureNeg > 0) || !finite(c.SAPOTemperatureNeg)):
		return fmt.Errorf("sapo_temperature_neg %g must be positive for loss_type sapo", c.SAPOTemperatureNeg)
	case c.NumIterations < 1:
		return fmt.Errorf("num_iterations %d must be >= 1", c.NumIterations)
	case !(c.Temperature > 0) || !finite(c.Temperature):
		return fmt.Errorf("temperature %g must be positive", c.Temperature)
	case c.LossType == LossDrGRPO && c.MaxCompletionLength <= 0:
		return fmt.Errorf("max_completion_length %d must be positive for loss_type dr_grpo", c.MaxCompletionLength)
	case !(c.MaxGradNorm >= 0) || !finite(c.MaxGradNorm):
		return fmt.Errorf("max_grad_norm %g must be a finite number >= 0", c.MaxGradNorm)
	case c.MicroBatch < 1:
		return fmt.Errorf("micro_batch %d must be >= 1", c.MicroBatch)
	case c.MaxSeqLen < 2:
		return fmt.Errorf("max_seq_len %d must be >= 2", c.MaxSeqLen)
	}
	if err := c.Optim().Validate(); err != nil {
		return err
	}
	if c.LoRA != nil {
		if err := c.LoRA.Validate(); err != nil {
			return err
		}
	}
	return nil
}
