package training

import (
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/rlhost/rlhost/host/config"
	"github.com/rlhost/rlhost/trainer/backend/cuda"
	"github.com/rlhost/rlhost/trainer/grpo"
)

// Settings are the trainer block's values.
type Settings struct {
	GRPO grpo.Config
	// Device is "auto", "cpu" or "cuda"; auto picks CUDA when this build
	// has it and a GPU answers, else the CPU, and says which.
	Device string
	// CheckpointEvery saves a checkpoint after every N-th step (0: only at
	// the end and on Ctrl-C); KeepCheckpoints keeps the newest N.
	CheckpointEvery, KeepCheckpoints int
	// SaveDType is the dtype of the final model's weights: f32 or bf16.
	SaveDType string
	// Warmup is an optional supervised warm-up run before the first step.
	Warmup *Warmup
}

// Warmup is the trainer block's warmup block: supervised fine-tuning on
// chat transcripts before GRPO starts.
type Warmup struct {
	File      string // JSONL, one {"messages": [...]} per line; relative to the job file
	Steps     int
	BatchSize int
	LR        float64
}

type trainerHCL struct {
	Device              *string  `hcl:"device,optional"`
	LossType            *string  `hcl:"loss_type,optional"`
	Epsilon             *float64 `hcl:"epsilon,optional"`
	EpsilonHigh         *float64 `hcl:"epsilon_high,optional"`
	Beta                *float64 `hcl:"beta,optional"`
	ImportanceSampling  *string  `hcl:"importance_sampling,optional"`
	ScaleRewards        *string  `hcl:"scale_rewards,optional"`
	NumIterations       *int     `hcl:"num_iterations,optional"`
	MaskTruncated       *bool    `hcl:"mask_truncated,optional"`
	MaxCompletionLength *int     `hcl:"max_completion_length,optional"`
	LearningRate        *float64 `hcl:"learning_rate,optional"`
	LRSchedule          *string  `hcl:"lr_schedule,optional"`
	WarmupSteps         *int     `hcl:"warmup_steps,optional"`
	AdamBeta1           *float64 `hcl:"adam_beta1,optional"`
	AdamBeta2           *float64 `hcl:"adam_beta2,optional"`
	AdamEpsilon         *float64 `hcl:"adam_epsilon,optional"`
	WeightDecay         *float64 `hcl:"weight_decay,optional"`
	MaxGradNorm         *float64 `hcl:"max_grad_norm,optional"`
	MicroBatch          *int     `hcl:"micro_batch,optional"`
	MaxSeqLen           *int     `hcl:"max_seq_len,optional"`
	CheckpointEvery     *int     `hcl:"checkpoint_every,optional"`
	KeepCheckpoints     *int     `hcl:"keep_checkpoints,optional"`
	SaveDType           *string  `hcl:"save_dtype,optional"`
	Warmup              *struct {
		File         string   `hcl:"file"`
		Steps        *int     `hcl:"steps,optional"`
		BatchSize    *int     `hcl:"batch_size,optional"`
		LearningRate *float64 `hcl:"learning_rate,optional"`
	} `hcl:"warmup,block"`
}

// settingAttrs maps grpo.Config's names in its errors to the block's.
var settingAttrs = map[string]string{
	"importance_sampling_level":  "importance_sampling",
	"mask_truncated_completions": "mask_truncated",
	"lr_scheduler_type":          "lr_schedule",
	"beta1":                      "adam_beta1",
	"beta2":                      "adam_beta2",
	"eps":                        "adam_epsilon",
}

// Decode reads the trainer block of f. temperature is the policy's
// sampling temperature: training must compute log-probs at the same one.
// totalSteps is the run's step count (the LR schedule's length).
func Decode(f *config.File, temperature float64, totalSteps int) (*Settings, hcl.Diagnostics) {
	tb := f.Trainer
	if tb == nil {
		return nil, nil
	}
	var h trainerHCL
	diags := gohcl.DecodeBody(tb.Body, f.EvalContext, &h)
	if diags.HasErrors() {
		return nil, diags
	}
	s := &Settings{GRPO: grpo.DefaultConfig(), Device: "auto", KeepCheckpoints: 2, SaveDType: "f32"}
	g := &s.GRPO
	g.Temperature = temperature
	setS := func(dst *string, v *string) {
		if v != nil {
			*dst = *v
		}
	}
	setF := func(dst *float64, v *float64) {
		if v != nil {
			*dst = *v
		}
	}
	setI := func(dst *int, v *int) {
		if v != nil {
			*dst = *v
		}
	}
	setS(&s.Device, h.Device)
	setS(&g.LossType, h.LossType)
	setF(&g.Epsilon, h.Epsilon)
	setF(&g.EpsilonHigh, h.EpsilonHigh)
	setF(&g.Beta, h.Beta)
	setS(&g.ImportanceSampling, h.ImportanceSampling)
	setS(&g.ScaleRewards, h.ScaleRewards)
	setI(&g.NumIterations, h.NumIterations)
	if h.MaskTruncated != nil {
		g.MaskTruncated = *h.MaskTruncated
	}
	setI(&g.MaxCompletionLength, h.MaxCompletionLength)
	setF(&g.LR, h.LearningRate)
	setS(&g.Schedule, h.LRSchedule)
	setI(&g.WarmupSteps, h.WarmupSteps)
	setF(&g.Beta1, h.AdamBeta1)
	setF(&g.Beta2, h.AdamBeta2)
	setF(&g.AdamEps, h.AdamEpsilon)
	setF(&g.WeightDecay, h.WeightDecay)
	setF(&g.MaxGradNorm, h.MaxGradNorm)
	setI(&g.MicroBatch, h.MicroBatch)
	setI(&g.MaxSeqLen, h.MaxSeqLen)
	setI(&s.CheckpointEvery, h.CheckpointEvery)
	setI(&s.KeepCheckpoints, h.KeepCheckpoints)
	setS(&s.SaveDType, h.SaveDType)
	// One optimiser update per step (num_iterations more).
	g.TotalSteps = totalSteps * g.NumIterations

	attrErr := func(name, detail string) {
		diags = append(diags, attrDiag(tb, name, "Invalid trainer setting", detail))
	}
	if !(temperature > 0) {
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Training needs sampling",
			Detail:  fmt.Sprintf("The policy's temperature is %g; GRPO compares sampled completions, so set temperature > 0 in the policy block.", temperature),
			Subject: tb.DefRange.Ptr()})
		return s, diags
	}
	if err := g.Validate(); err != nil {
		name, _, _ := strings.Cut(err.Error(), " ")
		if n, ok := settingAttrs[name]; ok {
			name = n
		}
		attrErr(name, err.Error())
	}
	switch s.Device {
	case "auto", "cpu":
	case "cuda":
		if !cuda.Built {
			attrErr("device", `device "cuda" needs a build with the CUDA backend (make build-cuda, docs/cuda.md); this rlhost has only the CPU backend`)
		}
	default:
		attrErr("device", fmt.Sprintf("device %q is not one of auto, cpu, cuda", s.Device))
	}
	if s.CheckpointEvery < 0 {
		attrErr("checkpoint_every", "checkpoint_every must be >= 0 (0 saves only at the end)")
	}
	if s.KeepCheckpoints < 1 {
		attrErr("keep_checkpoints", "keep_checkpoints must be >= 1")
	}
	if s.SaveDType != "f32" && s.SaveDType != "bf16" {
		attrErr("save_dtype", fmt.Sprintf("save_dtype %q is not one of f32, bf16", s.SaveDType))
	}
	if w := h.Warmup; w != nil {
		s.Warmup = &Warmup{File: w.File, Steps: 100, BatchSize: 8, LR: 1e-4}
		if !strings.HasPrefix(w.File, "/") {
			s.Warmup.File = f.Dir + "/" + w.File
		}
		setI(&s.Warmup.Steps, w.Steps)
		setI(&s.Warmup.BatchSize, w.BatchSize)
		setF(&s.Warmup.LR, w.LearningRate)
		if s.Warmup.Steps < 1 || s.Warmup.BatchSize < 1 || !(s.Warmup.LR > 0) {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid warmup block",
				Detail: "steps and batch_size must be >= 1 and learning_rate positive.", Subject: tb.DefRange.Ptr()})
		}
	}
	return s, diags
}

// attrDiag points at attribute name of the trainer block, or at the block.
func attrDiag(tb *config.Trainer, name, summary, detail string) *hcl.Diagnostic {
	rng := tb.DefRange
	if sb, ok := tb.Body.(*hclsyntax.Body); ok {
		if a, ok := sb.Attributes[name]; ok {
			rng = a.Expr.Range()
		}
	}
	return &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: detail, Subject: rng.Ptr()}
}
