package grpo

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/rlhost/rlhost/trainer/compute"
	"github.com/rlhost/rlhost/trainer/lora"
	"github.com/rlhost/rlhost/trainer/model"
	"github.com/rlhost/rlhost/trainer/safetensors"
)

// Checkpoint layout, under the directory given to Save:
//
//	model/                   the policy in Hugging Face layout (float32)
//	reference/               the frozen reference (only when beta > 0)
//	optimizer.safetensors    AdamW moments: exp_avg.<param>, exp_avg_sq.<param>
//	trainer_state.json       format, optimizer_step, config (written last)
//
// With LoRA the trained state is the adapter alone:
//
//	adapter/                 the adapter in PEFT layout (float32)
//	model/                   the frozen base, only when it was not loaded from a directory
//	optimizer.safetensors    AdamW moments of the adapter's factors only
//	trainer_state.json       also base_model: the base's directory
const (
	checkpointFormat = 1
	stateFile        = "trainer_state.json"
	optimizerFile    = "optimizer.safetensors"
	adapterDir       = "adapter"
)

type trainerState struct {
	Format        int    `json:"format"`
	OptimizerStep int    `json:"optimizer_step"`
	Config        Config `json:"config"`
	// BaseModel is, with LoRA, the frozen base's directory: absolute, or
	// relative to the checkpoint ("model").
	BaseModel string `json:"base_model,omitempty"`
	// DropoutCounter is the adapter's dropout mask counter (LoRA).
	DropoutCounter uint64 `json:"lora_dropout_counter,omitempty"`
}

// Save writes everything Resume needs to continue training exactly: the
// policy (and reference) weights in float32 HF layout, the AdamW moments,
// the optimiser step (which fixes the learning-rate schedule's position)
// and the config. trainer_state.json is written last, so a directory
// without it is an incomplete checkpoint.
func (t *Trainer) Save(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("grpo: save: %w", err)
	}
	state := trainerState{Format: checkpointFormat, OptimizerStep: t.opt.Step(), Config: t.cfg}
	if t.ad != nil {
		// The base never changes: point at its directory rather than copy it.
		state.BaseModel = t.m.Dir()
		if state.BaseModel == "" {
			state.BaseModel = "model"
			if err := t.m.Save(filepath.Join(dir, "model"), safetensors.F32); err != nil {
				return fmt.Errorf("grpo: save base: %w", err)
			}
		} else if abs, err := filepath.Abs(state.BaseModel); err == nil {
			state.BaseModel = abs
		}
		state.DropoutCounter = t.ad.DropoutCounter()
		if err := lora.Save(t.ad, filepath.Join(dir, adapterDir), state.BaseModel); err != nil {
			return fmt.Errorf("grpo: save: %w", err)
		}
	} else if err := t.m.Save(filepath.Join(dir, "model"), safetensors.F32); err != nil {
		return fmt.Errorf("grpo: save: %w", err)
	}
	if t.ref != nil {
		if err := t.ref.Save(filepath.Join(dir, "reference"), safetensors.F32); err != nil {
			return fmt.Errorf("grpo: save reference: %w", err)
		}
	}
	be := t.m.Device()
	mom, vel := t.opt.Moments()
	var ts []safetensors.Tensor
	for i, p := range t.params {
		for _, mv := range []struct {
			prefix string
			x      compute.Tensor
		}{{"exp_avg.", mom[i]}, {"exp_avg_sq.", vel[i]}} {
			data := make([]float32, p.Len())
			be.Download(data, mv.x)
			ts = append(ts, safetensors.Tensor{Name: mv.prefix + p.Name, Shape: p.Shape, Data: data})
		}
	}
	if err := safetensors.Write(filepath.Join(dir, optimizerFile), ts, safetensors.F32, nil); err != nil {
		return fmt.Errorf("grpo: save optimizer: %w", err)
	}
	b, err := json.MarshalIndent(state, "", "  ")
	if err != nil {
		return fmt.Errorf("grpo: save: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, stateFile), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("grpo: save: %w", err)
	}
	return nil
}

// LoadConfig reads the config a checkpoint was saved with.
func LoadConfig(dir string) (Config, int, error) {
	st, err := loadState(dir)
	if err != nil {
		return Config{}, 0, err
	}
	return st.Config, st.OptimizerStep, nil
}

func loadState(dir string) (*trainerState, error) {
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, fmt.Errorf("grpo: checkpoint %s: %w", dir, err)
	}
	var st trainerState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("grpo: checkpoint %s: %s: %w", dir, stateFile, err)
	}
	if st.Format != checkpointFormat {
		return nil, fmt.Errorf("grpo: checkpoint %s: format %d, want %d", dir, st.Format, checkpointFormat)
	}
	return &st, nil
}

// ModelDir is the directory of a checkpoint's model weights (config.json,
// tokenizer files): dir/model, or with LoRA the base's directory.
// AdapterDir is the checkpoint's PEFT adapter directory, "" without LoRA.
func ModelDir(dir string) (weights, adapter string, err error) {
	st, err := loadState(dir)
	if err != nil {
		return "", "", err
	}
	if st.Config.LoRA == nil {
		return filepath.Join(dir, "model"), "", nil
	}
	base := st.BaseModel
	if !filepath.IsAbs(base) {
		base = filepath.Join(dir, base)
	}
	return base, filepath.Join(dir, adapterDir), nil
}

// Resume restores a trainer saved by Save onto be, with the saved config;
// the next Step continues exactly where the saved trainer stood.
func Resume(be compute.Device, dir string) (*Trainer, error) {
	return ResumeWith(be, dir, nil)
}

// ResumeWith is Resume with a replacement config (for example more total
// steps). Settings that change the state's shape or meaning must match the
// saved ones: beta zero or not.
func ResumeWith(be compute.Device, dir string, cfg *Config) (*Trainer, error) {
	saved, step, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		cfg = &saved
	}
	if (cfg.Beta == 0) != (saved.Beta == 0) {
		return nil, fmt.Errorf("grpo: checkpoint %s was saved with beta %g; cannot resume with beta %g", dir, saved.Beta, cfg.Beta)
	}
	switch {
	case (cfg.LoRA == nil) != (saved.LoRA == nil):
		return nil, fmt.Errorf("grpo: checkpoint %s and the settings disagree on LoRA (saved with lora: %v); resume with the same kind of training", dir, saved.LoRA != nil)
	case cfg.LoRA != nil && !sameShape(cfg.LoRA.AdapterConfig, saved.LoRA.AdapterConfig):
		return nil, fmt.Errorf("grpo: checkpoint %s holds a LoRA adapter of rank %d, alpha %g on %v; the lora settings ask for rank %d, alpha %g on %v",
			dir, saved.LoRA.Rank, saved.LoRA.Alpha, saved.LoRA.Targets, cfg.LoRA.Rank, cfg.LoRA.Alpha, cfg.LoRA.Targets)
	}
	mdir, adir, err := ModelDir(dir)
	if err != nil {
		return nil, err
	}
	m, err := model.Load(be, mdir)
	if err != nil {
		return nil, fmt.Errorf("grpo: resume: %w", err)
	}
	if cfg.LoRA != nil && mdir == filepath.Join(dir, "model") {
		// The base is this checkpoint's copy, which pruning may delete:
		// later checkpoints must hold their own.
		m.ForgetDir()
	}
	var ref *model.Model
	var ad *model.Adapter
	if cfg.LoRA != nil {
		if ad, err = lora.Load(be, m.Cfg, adir); err != nil {
			return nil, fmt.Errorf("grpo: resume: %w", err)
		}
	} else if cfg.Beta != 0 {
		if ref, err = model.Load(be, filepath.Join(dir, "reference")); err != nil {
			return nil, fmt.Errorf("grpo: resume reference: %w", err)
		}
	}
	t, err := newTrainer(m, ref, ad, *cfg)
	if err != nil {
		return nil, err
	}
	f, err := safetensors.Open(filepath.Join(dir, optimizerFile))
	if err != nil {
		return nil, fmt.Errorf("grpo: resume: %w", err)
	}
	defer f.Close()
	mom, vel := t.opt.Moments()
	for i, p := range t.params {
		data := make([]float32, p.Len())
		for _, mv := range []struct {
			prefix string
			x      compute.Tensor
		}{{"exp_avg.", mom[i]}, {"exp_avg_sq.", vel[i]}} {
			if err := f.ReadF32(mv.prefix+p.Name, data); err != nil {
				return nil, fmt.Errorf("grpo: resume optimizer: %w", err)
			}
			be.Upload(mv.x, data)
		}
	}
	t.opt.SetStep(step)
	if t.ad != nil {
		st, err := loadState(dir)
		if err != nil {
			return nil, err
		}
		t.ad.SetDropoutCounter(st.DropoutCounter)
	}
	return t, nil
}
