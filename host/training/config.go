package training

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/hashicorp/hcl/v2"
	ctyjson "github.com/zclconf/go-cty/cty/json"

	"github.com/rlhost/rlhost/host/config"
	"github.com/rlhost/rlhost/trainer/device"
	"github.com/rlhost/rlhost/trainer/grpo"
	"github.com/rlhost/rlhost/trainer/optim"
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
	// MaxOffPolicySteps is the run block's max_off_policy_steps, or the
	// policy provider's default (DefaultMaxOffPolicySteps): how many
	// steps rollouts may run ahead of training, and so how many updates
	// old the weights that sampled a trained token may be.
	MaxOffPolicySteps int
}

// DefaultMaxOffPolicySteps is max_off_policy_steps when the run block does
// not set it. The embedded server shares the trainer's device: it cannot
// sample while the trainer updates, so running ahead overlaps only the
// sandboxes' work with training, and costs the run its reproducibility;
// it trains on-policy. A vLLM server samples on its own GPUs while the
// trainer updates, and one step ahead keeps both busy
// (docs/training.md has the measurements).
func DefaultMaxOffPolicySteps(provider string) int {
	if provider == VLLMProviderName {
		return 1
	}
	return 0
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
//
// Every attribute of the trainer block and its warmup block is read the
// same way (attributes): evaluated, turned into JSON and decoded one by
// one into its Go field under its TRL name, so a wrong type is reported at
// its own line. Then the settings are resolved against the rest of the
// job (resolve) and checked (check).
func Decode(f *config.File, temperature float64, totalSteps int) (*Settings, hcl.Diagnostics) {
	tb := f.Trainer
	if tb == nil {
		return nil, nil
	}
	s := &Settings{GRPO: grpo.DefaultConfig(), Device: "auto", Precision: "fp32", KeepCheckpoints: 2, SaveDType: "f32"}
	// transformers' default schedule; a job knows its length (total_steps).
	s.GRPO.Schedule = optim.Linear
	var names []string
	for _, k := range jsonKeys(grpo.Config{}) {
		if k != "lora" { // a block, decoded by decodeLoRA
			names = append(names, k)
		}
	}
	content, given, diags := attributes(f, tb.Body, append(append(names, hostSettings...), syncSettings...),
		[]hcl.BlockHeaderSchema{{Type: "warmup"}, {Type: "lora"}}, trainerAttribute(tb))
	if diags.HasErrors() {
		return nil, diags
	}
	if diags = append(diags, s.decode(tb, given)...); diags.HasErrors() {
		return nil, diags
	}
	var d hcl.Diagnostics
	s.Sync, d = decodeSync(f, given)
	if diags = append(diags, d...); diags.HasErrors() {
		return nil, diags
	}
	s.resolve(f, given, temperature, totalSteps)
	if !(temperature > 0) {
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Training needs sampling",
			Detail:  fmt.Sprintf("The policy's temperature is %g; GRPO compares sampled completions, so set temperature > 0 in the policy block.", temperature),
			Subject: tb.DefRange.Ptr()})
		return s, diags
	}
	diags = append(diags, s.check(tb)...)
	diags = append(diags, s.decodeBlocks(f, content.Blocks)...)
	diags = append(diags, s.checkSync(tb, diags.HasErrors())...)
	return s, diags
}

// attributes evaluates the attributes names of body, and returns each one
// given as JSON (null only for a setting that may be unset), with the
// body's content for its blocks. vet refuses an attribute that may not be
// written there (nil: none).
func attributes(f *config.File, body hcl.Body, names []string, blocks []hcl.BlockHeaderSchema, vet func(name string) *hcl.Diagnostic) (*hcl.BodyContent, map[string]json.RawMessage, hcl.Diagnostics) {
	sch := &hcl.BodySchema{Blocks: blocks}
	for _, n := range names {
		sch.Attributes = append(sch.Attributes, hcl.AttributeSchema{Name: n})
	}
	content, diags := body.Content(sch)
	if diags.HasErrors() {
		return nil, nil, diags
	}
	given := map[string]json.RawMessage{}
	for name, a := range content.Attributes {
		if vet != nil {
			if d := vet(name); d != nil {
				diags = append(diags, d)
				continue
			}
		}
		v, d := a.Expr.Value(f.EvalContext)
		diags = append(diags, d...)
		if d.HasErrors() {
			continue
		}
		if v.IsNull() {
			// null unsets a setting TRL lets be None (no bound); any
			// other keeps its default.
			if name == "sampling_clip_max" {
				given[name] = json.RawMessage("null")
			}
			continue
		}
		raw, err := ctyjson.Marshal(v, v.Type())
		if err != nil {
			diags = append(diags, config.AttributeDiag(body, a.Range, name, "Invalid setting", err.Error()))
			continue
		}
		given[name] = trlSpelling(name, raw)
	}
	return content, given, diags
}

// trainerAttribute refuses the grpo.Config settings the host fills in.
func trainerAttribute(tb *config.TrainerBlock) func(string) *hcl.Diagnostic {
	return func(name string) *hcl.Diagnostic {
		if why, ok := derived[name]; ok {
			return attrDiag(tb, name, "Setting not allowed here", fmt.Sprintf("%s is not set in the trainer block: %s.", name, why))
		}
		return nil
	}
}

// decodeJSON decodes one attribute's JSON into dst; the error names the
// attribute and the type it wants.
func decodeJSON(name string, raw json.RawMessage, dst any) error {
	if err := json.Unmarshal(raw, dst); err != nil {
		return fmt.Errorf("%s: %v", name, typeError(err))
	}
	return nil
}

// decode puts the trainer block's attributes into s: the host's own
// settings into their fields, the rest into grpo.Config under their TRL
// names (the weight-sync ones are decodeSync's).
func (s *Settings) decode(tb *config.TrainerBlock, given map[string]json.RawMessage) hcl.Diagnostics {
	var diags hcl.Diagnostics
	for name, raw := range given {
		var err error
		switch name {
		case "device":
			err = decodeJSON(name, raw, &s.Device)
		case "precision":
			err = decodeJSON(name, raw, &s.Precision)
		case "save_dtype":
			err = decodeJSON(name, raw, &s.SaveDType)
		case "checkpoint_every":
			err = decodeJSON(name, raw, &s.CheckpointEvery)
		case "keep_checkpoints":
			err = decodeJSON(name, raw, &s.KeepCheckpoints)
		case "deterministic":
			err = decodeJSON(name, raw, &s.Deterministic)
		case "weights_sync", "model", "adapter_dir", "importance_ratio_warn":
		default:
			// One attribute at a time into the config, so a wrong type is
			// reported at its own line.
			one, _ := json.Marshal(map[string]json.RawMessage{name: raw})
			err = decodeJSON(name, one, &s.GRPO)
		}
		if err != nil {
			diags = append(diags, attrDiag(tb, name, "Invalid trainer setting", err.Error()))
		}
	}
	return diags
}

// resolve fills in what the trainer block does not say itself: how far
// rollouts run ahead (the run block's, or the policy provider's default),
// the sampling correction that needs, the sampling temperature and the
// schedule's length.
func (s *Settings) resolve(f *config.File, given map[string]json.RawMessage, temperature float64, totalSteps int) {
	g := &s.GRPO
	provider := ""
	if pb := f.Policy(); pb != nil {
		provider = pb.Provider
	}
	s.MaxOffPolicySteps = DefaultMaxOffPolicySteps(provider)
	if k := f.Run.MaxOffPolicySteps; k != nil {
		s.MaxOffPolicySteps = *k
	}
	if _, set := given["sampling_correction"]; !set && s.MaxOffPolicySteps > 0 {
		// Off-policy rollouts need the correction (truncated importance
		// sampling, as TRL's vllm_importance_sampling_correction).
		g.SamplingCorrection = grpo.CorrectionTokenTruncate
	}
	g.Temperature = temperature
	// One optimiser update per step (num_iterations more).
	g.TotalSteps = totalSteps * g.NumIterations
}

// check refuses settings out of range, each at its attribute.
func (s *Settings) check(tb *config.TrainerBlock) hcl.Diagnostics {
	var diags hcl.Diagnostics
	bad := func(name, detail string) {
		diags = append(diags, attrDiag(tb, name, "Invalid trainer setting", detail))
	}
	if err := s.GRPO.Validate(); err != nil {
		name, _, _ := strings.Cut(err.Error(), " ")
		bad(name, err.Error())
	}
	switch s.Device {
	case "auto", "cpu":
	case "cuda":
		if !device.CUDABuilt() {
			bad("device", `device "cuda" needs a build with the CUDA backend (make build-cuda, docs/cuda.md); this rlhost has only the CPU backend`)
		}
	default:
		bad("device", fmt.Sprintf("device %q is not one of auto, cpu, cuda", s.Device))
	}
	switch {
	case s.Precision != "fp32" && s.Precision != "bf16":
		bad("precision", fmt.Sprintf("precision %q is not one of fp32, bf16", s.Precision))
	case s.Precision == "bf16" && s.Device == "cpu":
		bad("precision", `precision "bf16" needs device "cuda" (or "auto" on a GPU); the CPU backend computes in fp32`)
	case s.Precision == "bf16" && !device.CUDABuilt():
		bad("precision", `precision "bf16" needs a build with the CUDA backend (make build-cuda, docs/cuda.md); this rlhost has only the CPU backend`)
	}
	if s.CheckpointEvery < 0 {
		bad("checkpoint_every", "checkpoint_every must be >= 0 (0 saves only at the end)")
	}
	if s.KeepCheckpoints < 1 {
		bad("keep_checkpoints", "keep_checkpoints must be >= 1")
	}
	if s.SaveDType != "f32" && s.SaveDType != "bf16" {
		bad("save_dtype", fmt.Sprintf("save_dtype %q is not one of f32, bf16", s.SaveDType))
	}
	return diags
}

// decodeBlocks reads the trainer block's lora and warmup blocks.
func (s *Settings) decodeBlocks(f *config.File, blocks hcl.Blocks) hcl.Diagnostics {
	var diags hcl.Diagnostics
	for _, b := range blocks {
		switch {
		case b.Type == "lora" && s.GRPO.LoRA != nil, b.Type == "warmup" && s.Warmup != nil:
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Duplicate " + b.Type + " block", Subject: b.DefRange.Ptr()})
		case b.Type == "lora":
			l, d := decodeLoRA(f, b)
			diags = append(diags, d...)
			s.GRPO.LoRA = l
		default:
			w, d := decodeWarmup(f, b)
			diags = append(diags, d...)
			s.Warmup = w
		}
	}
	return diags
}

// decodeWarmup reads a warmup block.
func decodeWarmup(f *config.File, b *hcl.Block) (*Warmup, hcl.Diagnostics) {
	_, given, diags := attributes(f, b.Body, []string{"file", "steps", "batch_size", "learning_rate", "lora"}, nil, nil)
	if diags.HasErrors() {
		return nil, diags
	}
	if _, ok := given["file"]; !ok {
		return nil, hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Missing required argument",
			Detail: `The argument "file" is required: the JSONL file of chat transcripts to warm up on.`, Subject: b.DefRange.Ptr()}}
	}
	w := &Warmup{Steps: 100, BatchSize: 8, LR: 1e-4, LoRA: true}
	for name, dst := range map[string]any{"file": &w.File, "steps": &w.Steps, "batch_size": &w.BatchSize, "learning_rate": &w.LR, "lora": &w.LoRA} {
		if raw, ok := given[name]; ok {
			if err := decodeJSON(name, raw, dst); err != nil {
				diags = append(diags, config.AttributeDiag(b.Body, b.DefRange, name, "Invalid warmup setting", err.Error()))
			}
		}
	}
	if diags.HasErrors() {
		return nil, diags
	}
	w.Source = w.File
	if !filepath.IsAbs(w.File) {
		w.File = filepath.Join(f.Dir, w.File)
	}
	if w.Steps < 1 || w.BatchSize < 1 || !(w.LR > 0) {
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid warmup block",
			Detail: "steps and batch_size must be >= 1 and learning_rate positive.", Subject: b.DefRange.Ptr()})
	}
	return w, diags
}

// checkSync refuses weight-sync combinations that cannot work.
func (s *Settings) checkSync(tb *config.TrainerBlock, failed bool) hcl.Diagnostics {
	var diags hcl.Diagnostics
	if s.Sync != nil && s.Warmup != nil && !s.Warmup.LoRA {
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Warm-up with weights_sync",
			Detail:  "A warm-up with lora = false fine-tunes the base weights, which the vLLM server does not have. Warm up the adapter (lora = true, the default), or warm up with the embedded policy and serve the model it writes.",
			Subject: tb.DefRange.Ptr()})
	}
	if s.Sync != nil && s.GRPO.LoRA == nil && !failed && len(diags) == 0 {
		diags = append(diags, attrDiag(tb, "weights_sync", "Invalid trainer setting",
			`weights_sync = "lora" trains a LoRA adapter: add a lora block (lora { rank = 16 }, see docs/vllm.md)`))
	}
	return diags
}

// trlSpelling maps values TRL accepts for a setting in another type to
// rlhost's: scale_rewards = true or false means "group" or "none", as in
// GRPOConfig.
func trlSpelling(name string, raw json.RawMessage) json.RawMessage {
	if name == "scale_rewards" {
		switch string(raw) {
		case "true":
			return json.RawMessage(`"group"`)
		case "false":
			return json.RawMessage(`"none"`)
		}
	}
	return raw
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
func attrDiag(tb *config.TrainerBlock, name, summary, detail string) *hcl.Diagnostic {
	return config.AttributeDiag(tb.Body, tb.DefRange, name, summary, detail)
}
