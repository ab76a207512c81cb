package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/rlhost/rlhost/trainer/compute"
	"github.com/rlhost/rlhost/trainer/hfconfig"
	"github.com/rlhost/rlhost/trainer/safetensors"
)

// Load reads a Hugging Face model directory (config.json and
// model.safetensors or a sharded index) onto be. Weights in BF16, F16 or
// F32 are converted to float32 exactly.
func Load(be compute.Device, dir string) (*Model, error) {
	cfg, err := hfconfig.Load(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("model: load %s: %w", dir, err)
	}
	m, err := New(be, cfg)
	if err != nil {
		return nil, err
	}
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("model: load %s: %w", dir, err)
	}
	defer ck.Close()
	for _, name := range ck.Names() {
		if _, ok := m.byName[name]; ok {
			continue
		}
		// Tied checkpoints sometimes still carry lm_head.weight, and old
		// Llama ones carry the RoPE table; both are derived, not parameters.
		if name == "lm_head.weight" && cfg.TieWordEmbeddings || strings.HasSuffix(name, "rotary_emb.inv_freq") {
			continue
		}
		return nil, fmt.Errorf("model: load %s: unexpected tensor %q for this config", dir, name)
	}
	var buf []float32
	for _, p := range m.params {
		info, ok := ck.Info(p.Name)
		if !ok {
			return nil, fmt.Errorf("model: load %s: missing tensor %q", dir, p.Name)
		}
		if !sameShape(info.Shape, p.Shape) {
			return nil, fmt.Errorf("model: load %s: tensor %q has shape %v, config implies %v", dir, p.Name, info.Shape, p.Shape)
		}
		if cap(buf) < p.Len() {
			buf = make([]float32, p.Len())
		}
		buf = buf[:p.Len()]
		if err := ck.ReadF32(p.Name, buf); err != nil {
			return nil, fmt.Errorf("model: load %s: %w", dir, err)
		}
		be.Upload(p.W, buf)
	}
	m.srcDir = dir
	return m, nil
}

func sameShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// auxFiles are copied from the source directory on Save: the tokenizer and
// generation settings belong with the weights for vLLM and transformers.
func auxFiles() []string {
	return []string{"tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
		"special_tokens_map.json", "added_tokens.json", "generation_config.json"}
}

// Save writes the model to dir in Hugging Face layout: model.safetensors
// (F32, or BF16 rounded to nearest even), config.json with torch_dtype set
// accordingly, and generation_config.json; tokenizer files of the directory
// the model was loaded from are copied along.
func (m *Model) Save(dir string, dt safetensors.DType) error {
	return m.SaveEdited(dir, dt, nil)
}

// SaveEdited is Save with edit applied to each parameter's host copy
// before it is written (nil: none), so a caller can write derived weights,
// such as a LoRA merge, without changing the model.
func (m *Model) SaveEdited(dir string, dt safetensors.DType, edit func(p *Param, data []float32) error) error {
	dtype := map[safetensors.DType]string{safetensors.F32: "float32", safetensors.BF16: "bfloat16"}[dt]
	if dtype == "" {
		return fmt.Errorf("model: save: dtype %q not supported (want F32 or BF16)", dt)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("model: save: %w", err)
	}
	ts := make([]safetensors.Tensor, 0, len(m.params))
	for _, p := range m.params {
		data := make([]float32, p.Len())
		m.be.Download(data, p.W)
		if edit != nil {
			if err := edit(p, data); err != nil {
				return fmt.Errorf("model: save: %w", err)
			}
		}
		ts = append(ts, safetensors.Tensor{Name: p.Name, Shape: p.Shape, Data: data})
	}
	if err := safetensors.Write(filepath.Join(dir, "model.safetensors"), ts, dt, map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("model: save: %w", err)
	}
	cj, err := m.Cfg.Marshal(dtype)
	if err != nil {
		return fmt.Errorf("model: save: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cj, 0o644); err != nil {
		return fmt.Errorf("model: save: %w", err)
	}
	copied := map[string]bool{}
	if m.srcDir != "" && filepath.Clean(m.srcDir) != filepath.Clean(dir) {
		for _, f := range auxFiles() {
			err := CopyFile(filepath.Join(m.srcDir, f), filepath.Join(dir, f))
			if err == nil {
				copied[f] = true
			} else if !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("model: save: %w", err)
			}
		}
	}
	if !copied["generation_config.json"] {
		if _, err := os.Stat(filepath.Join(dir, "generation_config.json")); errors.Is(err, os.ErrNotExist) {
			gc := map[string]any{}
			if m.Cfg.BOSTokenID >= 0 {
				gc["bos_token_id"] = m.Cfg.BOSTokenID
			}
			if len(m.Cfg.EOSTokenIDs) > 0 {
				gc["eos_token_id"] = m.Cfg.EOSTokenIDs
			}
			b, _ := json.MarshalIndent(gc, "", "  ")
			if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), b, 0o644); err != nil {
				return fmt.Errorf("model: save: %w", err)
			}
		}
	}
	return nil
}

// CopyFile copies src to dst; the error wraps os.ErrNotExist when src is absent.
func CopyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return out.Close()
}
