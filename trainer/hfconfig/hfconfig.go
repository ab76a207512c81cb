// Package hfconfig reads and writes the Hugging Face config.json of
// Qwen2- and Llama-family causal language models, and provides named
// presets (tiny, 10m, qwen2.5-0.5b) for tests and benchmarks.
//
// It deliberately knows only the fields the trainer's model computes with;
// unknown fields are kept verbatim so a trained model is written back with
// the config it came with. Features the model does not implement (rope
// scaling, sliding-window attention, activations other than SiLU) are
// rejected at load time rather than silently computed wrong.
package hfconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
)

// Config is the model shape and numerics of a Qwen2/Llama checkpoint.
type Config struct {
	ModelType         string   // "qwen2" or "llama"
	Architectures     []string // e.g. ["Qwen2ForCausalLM"]
	HiddenSize        int
	IntermediateSize  int
	NumLayers         int
	NumHeads          int
	NumKVHeads        int
	HeadDim           int
	VocabSize         int
	MaxPositions      int
	RMSNormEps        float64
	RopeTheta         float64
	TieWordEmbeddings bool
	AttentionBias     bool // q/k/v biases (Qwen2 always, Llama when attention_bias)
	Dtype             string
	BOSTokenID        int
	EOSTokenIDs       []int

	// raw keeps every field of the file this config was read from.
	raw map[string]json.RawMessage
}

// wire is the JSON shape; pointer fields distinguish absent from zero.
type wire struct {
	ModelType         string          `json:"model_type"`
	Architectures     []string        `json:"architectures"`
	HiddenSize        int             `json:"hidden_size"`
	IntermediateSize  int             `json:"intermediate_size"`
	NumLayers         int             `json:"num_hidden_layers"`
	NumHeads          int             `json:"num_attention_heads"`
	NumKVHeads        *int            `json:"num_key_value_heads"`
	HeadDim           *int            `json:"head_dim"`
	VocabSize         int             `json:"vocab_size"`
	MaxPositions      int             `json:"max_position_embeddings"`
	RMSNormEps        *float64        `json:"rms_norm_eps"`
	RopeTheta         *float64        `json:"rope_theta"`
	RopeParameters    *ropeParams     `json:"rope_parameters"`
	RopeScaling       json.RawMessage `json:"rope_scaling"`
	TieWordEmbeddings *bool           `json:"tie_word_embeddings"`
	AttentionBias     *bool           `json:"attention_bias"`
	TorchDtype        string          `json:"torch_dtype"`
	Dtype             string          `json:"dtype"`
	HiddenAct         string          `json:"hidden_act"`
	UseSlidingWindow  bool            `json:"use_sliding_window"`
	BOSTokenID        *int            `json:"bos_token_id"`
	EOSTokenID        json.RawMessage `json:"eos_token_id"`
}

type ropeParams struct {
	RopeTheta *float64 `json:"rope_theta"`
	RopeType  string   `json:"rope_type"`
}

// Load reads a config.json file.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("hfconfig: %w", err)
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("hfconfig: %s: %w", path, err)
	}
	return c, nil
}

// Parse decodes and validates config.json content.
func Parse(data []byte) (*Config, error) {
	var w wire
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("decode config: %w", err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("decode config: %w", err)
	}
	c := &Config{
		ModelType: w.ModelType, Architectures: w.Architectures,
		HiddenSize: w.HiddenSize, IntermediateSize: w.IntermediateSize,
		NumLayers: w.NumLayers, NumHeads: w.NumHeads, VocabSize: w.VocabSize,
		MaxPositions: w.MaxPositions, raw: raw,
		RMSNormEps: 1e-6, RopeTheta: 10000, Dtype: w.TorchDtype,
	}
	if c.Dtype == "" {
		c.Dtype = w.Dtype
	}
	switch w.ModelType {
	case "qwen2":
		c.AttentionBias = true // modeling_qwen2 has q/k/v bias unconditionally
	case "llama":
	default:
		return nil, fmt.Errorf("model_type %q is not supported (want qwen2 or llama)", w.ModelType)
	}
	if w.AttentionBias != nil {
		c.AttentionBias = *w.AttentionBias
	}
	c.NumKVHeads = c.NumHeads
	if w.NumKVHeads != nil {
		c.NumKVHeads = *w.NumKVHeads
	}
	if c.NumHeads > 0 {
		c.HeadDim = c.HiddenSize / c.NumHeads
	}
	if w.HeadDim != nil {
		c.HeadDim = *w.HeadDim
	}
	if w.RMSNormEps != nil {
		c.RMSNormEps = *w.RMSNormEps
	}
	switch {
	case w.RopeTheta != nil:
		c.RopeTheta = *w.RopeTheta
	case w.RopeParameters != nil && w.RopeParameters.RopeTheta != nil:
		c.RopeTheta = *w.RopeParameters.RopeTheta
	}
	if w.RopeParameters != nil && w.RopeParameters.RopeType != "" && w.RopeParameters.RopeType != "default" {
		return nil, fmt.Errorf("rope_type %q is not supported (only default)", w.RopeParameters.RopeType)
	}
	if s := strings.TrimSpace(string(w.RopeScaling)); s != "" && s != "null" {
		return nil, errors.New("rope_scaling is not supported")
	}
	if w.HiddenAct != "" && w.HiddenAct != "silu" {
		return nil, fmt.Errorf("hidden_act %q is not supported (only silu)", w.HiddenAct)
	}
	if w.UseSlidingWindow {
		return nil, errors.New("use_sliding_window is not supported")
	}
	c.TieWordEmbeddings = w.TieWordEmbeddings != nil && *w.TieWordEmbeddings
	c.BOSTokenID = -1
	if w.BOSTokenID != nil {
		c.BOSTokenID = *w.BOSTokenID
	}
	if len(w.EOSTokenID) > 0 && string(w.EOSTokenID) != "null" {
		var one int
		if err := json.Unmarshal(w.EOSTokenID, &one); err == nil {
			c.EOSTokenIDs = []int{one}
		} else if err := json.Unmarshal(w.EOSTokenID, &c.EOSTokenIDs); err != nil {
			return nil, fmt.Errorf("eos_token_id: %w", err)
		}
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// Validate checks that the shape is usable by the model.
func (c *Config) Validate() error {
	pos := map[string]int{
		"hidden_size": c.HiddenSize, "intermediate_size": c.IntermediateSize,
		"num_hidden_layers": c.NumLayers, "num_attention_heads": c.NumHeads,
		"num_key_value_heads": c.NumKVHeads, "head_dim": c.HeadDim, "vocab_size": c.VocabSize,
	}
	for _, k := range slices.Sorted(maps.Keys(pos)) {
		if pos[k] <= 0 || pos[k] > 1<<24 {
			return fmt.Errorf("%s = %d is out of range", k, pos[k])
		}
	}
	if c.NumHeads%c.NumKVHeads != 0 {
		return fmt.Errorf("num_attention_heads %d is not a multiple of num_key_value_heads %d", c.NumHeads, c.NumKVHeads)
	}
	if c.HeadDim%2 != 0 {
		return fmt.Errorf("head_dim %d must be even for RoPE", c.HeadDim)
	}
	if !(c.RMSNormEps > 0) || !(c.RopeTheta > 0) {
		return fmt.Errorf("rms_norm_eps %g and rope_theta %g must be positive", c.RMSNormEps, c.RopeTheta)
	}
	return nil
}

// NumParams counts parameters, counting tied embeddings once.
func (c *Config) NumParams() int {
	C, q, kv := c.HiddenSize, c.NumHeads*c.HeadDim, c.NumKVHeads*c.HeadDim
	per := C + C*q + C*kv*2 + q*C + C + 3*C*c.IntermediateSize
	if c.AttentionBias {
		per += q + 2*kv
	}
	n := c.VocabSize*C + c.NumLayers*per + C
	if !c.TieWordEmbeddings {
		n += c.VocabSize * C
	}
	return n
}

// Marshal returns config.json content for c with dtype as torch_dtype,
// keeping unknown fields from the file c was loaded from.
func (c *Config) Marshal(dtype string) ([]byte, error) {
	out := map[string]any{}
	for k, v := range c.raw {
		out[k] = v
	}
	arch := c.Architectures
	if len(arch) == 0 {
		arch = []string{"Qwen2ForCausalLM"}
		if c.ModelType == "llama" {
			arch = []string{"LlamaForCausalLM"}
		}
	}
	set := map[string]any{
		"model_type": c.ModelType, "architectures": arch,
		"hidden_size": c.HiddenSize, "intermediate_size": c.IntermediateSize,
		"num_hidden_layers": c.NumLayers, "num_attention_heads": c.NumHeads,
		"num_key_value_heads": c.NumKVHeads, "head_dim": c.HeadDim,
		"vocab_size": c.VocabSize, "max_position_embeddings": c.MaxPositions,
		"rms_norm_eps": c.RMSNormEps, "rope_theta": c.RopeTheta,
		"tie_word_embeddings": c.TieWordEmbeddings, "hidden_act": "silu",
		"torch_dtype": dtype, "use_cache": true,
	}
	if c.ModelType != "qwen2" || c.raw["attention_bias"] != nil {
		set["attention_bias"] = c.AttentionBias
	}
	if c.ModelType == "qwen2" {
		set["use_sliding_window"] = false
	}
	if c.BOSTokenID >= 0 {
		set["bos_token_id"] = c.BOSTokenID
	}
	switch len(c.EOSTokenIDs) {
	case 0:
	case 1:
		set["eos_token_id"] = c.EOSTokenIDs[0]
	default:
		set["eos_token_id"] = c.EOSTokenIDs
	}
	maps.Copy(out, set)
	delete(out, "dtype") // torch_dtype is authoritative in what we write
	delete(out, "rope_parameters")
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return nil, fmt.Errorf("hfconfig: encode: %w", err)
	}
	return buf.Bytes(), nil
}

// Preset returns a named configuration: "tiny" (tests), "10m" (~10M
// parameters, benchmarks), "1m" (a small model trained from scratch by the
// quickstart) or "qwen2.5-0.5b" (Qwen2.5-0.5B-Instruct's shape).
func Preset(name string) (*Config, error) {
	base := Config{
		ModelType: "qwen2", Architectures: []string{"Qwen2ForCausalLM"},
		RMSNormEps: 1e-6, RopeTheta: 1e6, AttentionBias: true, Dtype: "float32",
		BOSTokenID: -1,
	}
	c := base
	switch name {
	case "tiny":
		c.HiddenSize, c.IntermediateSize, c.NumLayers = 16, 40, 2
		c.NumHeads, c.NumKVHeads, c.HeadDim = 4, 2, 4
		c.VocabSize, c.MaxPositions, c.TieWordEmbeddings = 64, 128, true
		c.RopeTheta = 10000
		c.EOSTokenIDs = []int{63}
	case "1m":
		// Small enough to train from scratch in minutes on a laptop CPU
		// (the quickstart); the vocabulary is usually replaced by the
		// tokenizer's.
		c.HiddenSize, c.IntermediateSize, c.NumLayers = 128, 384, 3
		c.NumHeads, c.NumKVHeads, c.HeadDim = 4, 2, 32
		c.VocabSize, c.MaxPositions, c.TieWordEmbeddings = 512, 512, true
		c.RopeTheta = 10000
		c.EOSTokenIDs = []int{511}
	case "10m":
		c.HiddenSize, c.IntermediateSize, c.NumLayers = 256, 768, 8
		c.NumHeads, c.NumKVHeads, c.HeadDim = 8, 2, 32
		c.VocabSize, c.MaxPositions, c.TieWordEmbeddings = 8192, 2048, true
		c.EOSTokenIDs = []int{8191}
	case "qwen2.5-0.5b":
		c.HiddenSize, c.IntermediateSize, c.NumLayers = 896, 4864, 24
		c.NumHeads, c.NumKVHeads, c.HeadDim = 14, 2, 64
		c.VocabSize, c.MaxPositions, c.TieWordEmbeddings = 151936, 32768, true
		c.BOSTokenID, c.EOSTokenIDs = 151643, []int{151645}
		c.Dtype = "bfloat16"
	default:
		return nil, fmt.Errorf("hfconfig: unknown preset %q (want tiny, 1m, 10m or qwen2.5-0.5b)", name)
	}
	return &c, nil
}

// PresetNames lists the presets Preset accepts.
func PresetNames() []string { return []string{"tiny", "1m", "10m", "qwen2.5-0.5b"} }
