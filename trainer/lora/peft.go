package lora

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/rlhost/rlhost/trainer/compute"
	"github.com/rlhost/rlhost/trainer/hfconfig"
	"github.com/rlhost/rlhost/trainer/model"
	"github.com/rlhost/rlhost/trainer/safetensors"
)

// File names of PEFT's layout.
const (
	ConfigFile  = "adapter_config.json"
	WeightsFile = "adapter_model.safetensors"
)

// peftConfig is adapter_config.json as PEFT's LoraConfig writes it (the
// fields rlhost reads or must refuse; unknown fields are ignored).
type peftConfig struct {
	PeftType          string          `json:"peft_type"`
	TaskType          string          `json:"task_type"`
	BaseModel         string          `json:"base_model_name_or_path"`
	R                 int             `json:"r"`
	LoraAlpha         float64         `json:"lora_alpha"`
	LoraDropout       float64         `json:"lora_dropout"`
	TargetModules     json.RawMessage `json:"target_modules"`
	UseRSLoRA         bool            `json:"use_rslora"`
	Bias              string          `json:"bias"`
	FanInFanOut       bool            `json:"fan_in_fan_out"`
	UseDoRA           bool            `json:"use_dora"`
	ModulesToSave     []string        `json:"modules_to_save"`
	RankPattern       map[string]any  `json:"rank_pattern"`
	AlphaPattern      map[string]any  `json:"alpha_pattern"`
	LayersToTransform json.RawMessage `json:"layers_to_transform"`
	InferenceMode     bool            `json:"inference_mode"`
	InitLoraWeights   bool            `json:"init_lora_weights"`
	Revision          *string         `json:"revision"`
	LayersPattern     *string         `json:"layers_pattern"`
	MegatronConfig    *string         `json:"megatron_config"`
	MegatronCore      string          `json:"megatron_core"`
	LoftqConfig       map[string]any  `json:"loftq_config"`
	AutoMapping       *string         `json:"auto_mapping"`
}

// Config is what adapter_config.json says about an adapter.
type Config struct {
	model.AdapterConfig
	// BaseModel is base_model_name_or_path: the base the adapter was
	// trained on (a hub name or a path), as recorded by its writer.
	BaseModel string
}

// ReadConfig reads and checks dir/adapter_config.json. It refuses
// adapters rlhost cannot apply exactly (DoRA, biases, per-layer ranks,
// modules_to_save, regex target_modules) with an error naming the field.
func ReadConfig(dir string) (*Config, error) {
	path := filepath.Join(dir, ConfigFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("lora: %w", err)
	}
	var pc peftConfig
	if err := json.Unmarshal(b, &pc); err != nil {
		return nil, fmt.Errorf("lora: %s: %w", path, err)
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("lora: %s: %s", path, fmt.Sprintf(format, a...))
	}
	switch {
	case pc.PeftType != "LORA":
		return nil, bad("peft_type %q is not LORA", pc.PeftType)
	case pc.Bias != "" && pc.Bias != "none":
		return nil, bad("bias %q is not supported (only \"none\")", pc.Bias)
	case pc.FanInFanOut:
		return nil, bad("fan_in_fan_out true is not supported")
	case pc.UseDoRA:
		return nil, bad("use_dora true is not supported")
	case len(pc.ModulesToSave) > 0:
		return nil, bad("modules_to_save %v is not supported", pc.ModulesToSave)
	case len(pc.RankPattern) > 0 || len(pc.AlphaPattern) > 0:
		return nil, bad("rank_pattern and alpha_pattern are not supported")
	case len(pc.LayersToTransform) > 0 && string(pc.LayersToTransform) != "null":
		return nil, bad("layers_to_transform is not supported")
	}
	var names []string
	if err := json.Unmarshal(pc.TargetModules, &names); err != nil {
		var one string
		if json.Unmarshal(pc.TargetModules, &one) != nil {
			return nil, bad("target_modules must be a list of module names")
		}
		names = []string{one}
	}
	c := &Config{BaseModel: pc.BaseModel, AdapterConfig: model.AdapterConfig{
		Rank: pc.R, Alpha: pc.LoraAlpha, Dropout: pc.LoraDropout, RSLoRA: pc.UseRSLoRA}}
	for _, n := range names {
		m, ok := model.ParseModule(n)
		if !ok {
			return nil, bad("target module %q is not one of q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj", n)
		}
		if !slices.Contains(c.Targets, m) {
			c.Targets = append(c.Targets, m)
		}
	}
	slices.Sort(c.Targets)
	if err := c.AdapterConfig.Validate(); err != nil {
		return nil, bad("%v", err)
	}
	return c, nil
}

// Load reads the PEFT adapter in dir onto dev, for a base model of cfg.
// Every tensor must be one the config implies, with the shape it implies.
func Load(dev compute.Device, cfg *hfconfig.Config, dir string) (*model.Adapter, error) {
	c, err := ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	a, err := model.NewAdapter(dev, cfg, c.AdapterConfig)
	if err != nil {
		return nil, fmt.Errorf("lora: load %s: %w", dir, err)
	}
	path := filepath.Join(dir, WeightsFile)
	f, err := safetensors.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("lora: load %s: no %s (adapter_model.bin is not read; save with safe_serialization)", dir, WeightsFile)
		}
		return nil, fmt.Errorf("lora: load %s: %w", dir, err)
	}
	defer f.Close()
	for _, t := range f.Header.Tensors {
		if _, ok := a.Param(t.Name); !ok {
			name := t.Name
			return nil, fmt.Errorf("lora: load %s: unexpected tensor %q for this adapter config and base model", path, name)
		}
	}
	var buf []float32
	for _, p := range a.Params() {
		info, ok := f.Info(p.Name)
		if !ok {
			return nil, fmt.Errorf("lora: load %s: missing tensor %q", path, p.Name)
		}
		if !slices.Equal(info.Shape, p.Shape) {
			return nil, fmt.Errorf("lora: load %s: tensor %q has shape %v, want %v", path, p.Name, info.Shape, p.Shape)
		}
		buf = slices.Grow(buf[:0], p.Len())[:p.Len()]
		if err := f.ReadF32(p.Name, buf); err != nil {
			return nil, fmt.Errorf("lora: load %s: %w", path, err)
		}
		dev.Upload(p.W, buf)
	}
	return a, nil
}

// Save writes a to dir in PEFT's layout (F32 weights). base is recorded
// as base_model_name_or_path.
func Save(a *model.Adapter, dir string, base string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("lora: save: %w", err)
	}
	targets := make([]string, len(a.Cfg.Targets))
	for i, m := range a.Cfg.Targets {
		targets[i] = m.String()
	}
	tm, _ := json.Marshal(targets)
	pc := peftConfig{
		PeftType: "LORA", TaskType: "CAUSAL_LM", BaseModel: base,
		R: a.Cfg.Rank, LoraAlpha: a.Cfg.Alpha, LoraDropout: a.Cfg.Dropout, TargetModules: tm,
		UseRSLoRA: a.Cfg.RSLoRA, Bias: "none", InferenceMode: true, InitLoraWeights: true,
		RankPattern: map[string]any{}, AlphaPattern: map[string]any{}, LayersToTransform: json.RawMessage("null"),
		// PEFT's LoraConfig defaults for fields rlhost does not use.
		LoftqConfig: map[string]any{}, MegatronCore: "megatron.core",
	}
	b, err := json.MarshalIndent(pc, "", "  ")
	if err != nil {
		return fmt.Errorf("lora: save: %w", err)
	}
	ts := make([]safetensors.Tensor, 0, len(a.Params()))
	for _, p := range a.Params() {
		data := make([]float32, p.Len())
		a.Device().Download(data, p.W)
		ts = append(ts, safetensors.Tensor{Name: p.Name, Shape: p.Shape, Data: data})
	}
	if err := safetensors.Write(filepath.Join(dir, WeightsFile), ts, safetensors.F32, map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("lora: save: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("lora: save: %w", err)
	}
	return nil
}
