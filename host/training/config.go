package training

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	ctyjson "github.com/zclconf/go-cty/cty/json"

	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/host/config"
	"github.com/rlhost/rlhost/trainer/compute/cuda"
	"github.com/rlhost/rlhost/trainer/grpo"
)

// Settings are the trainer block's values.
type Settings struct {
	GRPO grpo.Config
	// Device is "auto", "cpu" or "cuda"; auto picks CUDA when this build
	// has it and a GPU answers, else the CPU, and says which.
	Device string
	// Precision is "fp32" or "bf16" (BF16 matmuls with FP32 master
	// weights, CUDA only).
	Precision string
	// CheckpointEvery saves a checkpoint after every N-th step (0: only at
	// the end and on Ctrl-C); KeepCheckpoints keeps the newest N.
	CheckpointEvery, KeepCheckpoints int
	// SaveDType is the dtype of the final model's weights: f32 or bf16.
	SaveDType string
	// Deterministic has the embedded server forward each sequence alone
	// where the device's generation is not batch-invariant (serve.Options).
	Deterministic bool
	// Warmup is an optional supervised warm-up run before the first step.
	Warmup *Warmup
	// Sync is set when the policy is served elsewhere (weights_sync).
	Sync *WeightsSync
}

// Warmup is the trainer block's warmup block: supervised fine-tuning on
// chat transcripts before GRPO starts.
type Warmup struct {
	File      string // JSONL, one {"messages": [...]} per line; absolute
	Source    string // File as the job file names it, for messages
	Steps     int
	BatchSize int
	LR        float64
	// LoRA is false when a LoRA run's warm-up fine-tunes every weight of
	// the base instead of the adapter (the block's lora = false).
	LoRA bool
}

// hostSettings are the trainer block's attributes that are not GRPO's:
// the rest are grpo.Config's, under its JSON (TRL) names, so that
// docs/grpo.md is the one reference for them.
var hostSettings = []string{"device", "precision", "checkpoint_every", "keep_checkpoints", "save_dtype", "deterministic"}

// derived are grpo.Config settings the host fills in, never the block.
var derived = map[string]string{
	"temperature": "it is the policy block's sampling temperature",
	"total_steps": "it is run.steps × num_iterations",
}

// Decode reads the trainer block of f. temperature is the policy's
// sampling temperature: training must compute log-probs at the same one.
// totalSteps is the run's step count (the LR schedule's length).
func Decode(f *config.File, temperature float64, totalSteps int) (*Settings, hcl.Diagnostics) {
	tb := f.Trainer
	if tb == nil {
		return nil, nil
	}
	s := &Settings{GRPO: grpo.DefaultConfig(), Device: "auto", Precision: "fp32", KeepCheckpoints: 2, SaveDType: "f32"}
	g := &s.GRPO
	grpoKeys := jsonKeys(grpo.Config{})
	schema := &hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{{Type: "warmup"}, {Type: "lora"}}}
	for _, k := range grpoKeys {
		if k == "lora" { // a block, decoded by decodeLoRA
			continue
		}
		schema.Attributes = append(schema.Attributes, hcl.AttributeSchema{Name: k})
	}
	for _, k := range append(hostSettings, syncSettings...) {
		schema.Attributes = append(schema.Attributes, hcl.AttributeSchema{Name: k})
	}
	content, diags := tb.Body.Content(schema)
	if diags.HasErrors() {
		return nil, diags
	}
	given := map[string]json.RawMessage{}
	for name, a := range content.Attributes {
		if why, ok := derived[name]; ok {
			diags = append(diags, attrDiag(tb, name, "Setting not allowed here", fmt.Sprintf("%s is not set in the trainer block: %s.", name, why)))
			continue
		}
		v, d := a.Expr.Value(f.EvalContext)
		diags = append(diags, d...)
		if d.HasErrors() {
			continue
		}
		raw, err := ctyjson.Marshal(v, v.Type())
		if err != nil {
			diags = append(diags, attrDiag(tb, name, "Invalid trainer setting", err.Error()))
			continue
		}
		given[name] = raw
	}
	if diags.HasErrors() {
		return nil, diags
	}
	attrErr := func(name, detail string) {
		diags = append(diags, attrDiag(tb, name, "Invalid trainer setting", detail))
	}
	for name, raw := range given {
		var dst any
		switch name {
		case "device", "precision", "save_dtype":
			dst = map[string]*string{"device": &s.Device, "precision": &s.Precision, "save_dtype": &s.SaveDType}[name]
		case "checkpoint_every", "keep_checkpoints":
			dst = map[string]*int{"checkpoint_every": &s.CheckpointEvery, "keep_checkpoints": &s.KeepCheckpoints}[name]
		case "deterministic":
			dst = &s.Deterministic
		case "weights_sync", "model", "adapter_dir", "importance_ratio_warn":
			continue // decodeSync's
		default:
			// One attribute at a time into the config, so a wrong type is
			// reported at its own line.
			one, _ := json.Marshal(map[string]json.RawMessage{name: raw})
			if err := json.Unmarshal(one, g); err != nil {
				attrErr(name, fmt.Sprintf("%s: %v", name, typeError(err)))
			}
			continue
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			attrErr(name, fmt.Sprintf("%s: %v", name, typeError(err)))
		}
	}
	if diags.HasErrors() {
		return nil, diags
	}
	var d hcl.Diagnostics
	s.Sync, d = decodeSync(f, given)
	if diags = append(diags, d...); diags.HasErrors() {
		return nil, diags
	}
	g.Temperature = temperature
	// One optimiser update per step (num_iterations more).
	g.TotalSteps = totalSteps * g.NumIterations
	if !(temperature > 0) {
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Training needs sampling",
			Detail:  fmt.Sprintf("The policy's temperature is %g; GRPO compares sampled completions, so set temperature > 0 in the policy block.", temperature),
			Subject: tb.DefRange.Ptr()})
		return s, diags
	}
	if err := g.Validate(); err != nil {
		name, _, _ := strings.Cut(err.Error(), " ")
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
	switch {
	case s.Precision != "fp32" && s.Precision != "bf16":
		attrErr("precision", fmt.Sprintf("precision %q is not one of fp32, bf16", s.Precision))
	case s.Precision == "bf16" && s.Device == "cpu":
		attrErr("precision", `precision "bf16" needs device "cuda" (or "auto" on a GPU); the CPU backend computes in fp32`)
	case s.Precision == "bf16" && !cuda.Built:
		attrErr("precision", `precision "bf16" needs a build with the CUDA backend (make build-cuda, docs/cuda.md); this rlhost has only the CPU backend`)
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
	for _, b := range content.Blocks {
		if b.Type == "lora" {
			if g.LoRA != nil {
				diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Duplicate lora block", Subject: b.DefRange.Ptr()})
				continue
			}
			l, d := decodeLoRA(f, b)
			diags = append(diags, d...)
			g.LoRA = l
			continue
		}
		if s.Warmup != nil {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Duplicate warmup block", Subject: b.DefRange.Ptr()})
			continue
		}
		var w struct {
			File         string   `hcl:"file"`
			Steps        *int     `hcl:"steps,optional"`
			BatchSize    *int     `hcl:"batch_size,optional"`
			LearningRate *float64 `hcl:"learning_rate,optional"`
			LoRA         *bool    `hcl:"lora,optional"`
		}
		d := gohcl.DecodeBody(b.Body, f.EvalContext, &w)
		diags = append(diags, d...)
		if d.HasErrors() {
			continue
		}
		s.Warmup = &Warmup{File: w.File, Source: w.File, Steps: 100, BatchSize: 8, LR: 1e-4, LoRA: true}
		if w.LoRA != nil {
			s.Warmup.LoRA = *w.LoRA
		}
		if !filepath.IsAbs(w.File) {
			s.Warmup.File = filepath.Join(f.Dir, w.File)
		}
		if w.Steps != nil {
			s.Warmup.Steps = *w.Steps
		}
		if w.BatchSize != nil {
			s.Warmup.BatchSize = *w.BatchSize
		}
		if w.LearningRate != nil {
			s.Warmup.LR = *w.LearningRate
		}
		if s.Warmup.Steps < 1 || s.Warmup.BatchSize < 1 || !(s.Warmup.LR > 0) {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid warmup block",
				Detail: "steps and batch_size must be >= 1 and learning_rate positive.", Subject: b.DefRange.Ptr()})
		}
	}
	if s.Sync != nil && s.Warmup != nil && !s.Warmup.LoRA {
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Warm-up with weights_sync",
			Detail:  "A warm-up with lora = false fine-tunes the base weights, which the vLLM server does not have. Warm up the adapter (lora = true, the default), or warm up with the embedded policy and serve the model it writes.",
			Subject: tb.DefRange.Ptr()})
	}
	if s.Sync != nil && g.LoRA == nil && !diags.HasErrors() {
		diags = append(diags, attrDiag(tb, "weights_sync", "Invalid trainer setting",
			`weights_sync = "lora" trains a LoRA adapter: add a lora block (lora { rank = 16 }, see docs/vllm.md)`))
	}
	return s, diags
}

// jsonKeys lists the JSON names of v's fields.
func jsonKeys(v any) []string {
	var out []string
	t := reflect.TypeOf(v)
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}

// typeError says what JSON decoding wanted, without Go type names.
func typeError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		want := te.Type.Kind().String()
		switch te.Type.Kind() {
		case reflect.Float64, reflect.Float32:
			want = "a number"
		case reflect.Int, reflect.Int64:
			want = "a whole number"
		case reflect.String:
			want = "a string"
		case reflect.Bool:
			want = "true or false"
		}
		return fmt.Sprintf("want %s, got %s", want, te.Value)
	}
	return err.Error()
}

// attrDiag points at attribute name of the trainer block, or at the block.
func attrDiag(tb *config.Trainer, name, summary, detail string) *hcl.Diagnostic {
	d := schema.Diagnostic{Severity: schema.Error, Summary: summary, Detail: detail, Path: []string{name}}
	return config.InConfigBody(schema.Diagnostics{d}, config.Origin{Body: tb.Body, Block: tb.DefRange})[0]
}
