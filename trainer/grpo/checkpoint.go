package grpo

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/rlhost/rlhost/trainer/compute"
	"github.com/rlhost/rlhost/trainer/model"
	"github.com/rlhost/rlhost/trainer/safetensors"
)

// Checkpoint layout, under the directory given to Save:
//
//	model/                   the policy in Hugging Face layout (float32)
//	reference/               the frozen reference (only when beta > 0)
//	optimizer.safetensors    AdamW moments: exp_avg.<param>, exp_avg_sq.<param>
//	trainer_state.json       format, optimizer_step, config (written last)
const (
	checkpointFormat = 1
	stateFile        = "trainer_state.json"
	optimizerFile    = "optimizer.safetensors"
)

type trainerState struct {
	Format        int    `json:"format"`
	OptimizerStep int    `json:"optimizer_step"`
	Config        Config `json:"config"`
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
	if err := t.m.Save(filepath.Join(dir, "model"), safetensors.F32); err != nil {
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
	for i, p := range t.m.Params() {
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
	b, err := json.MarshalIndent(trainerState{Format: checkpointFormat, OptimizerStep: t.opt.Step(), Config: t.cfg}, "", "  ")
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
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return Config{}, 0, fmt.Errorf("grpo: checkpoint %s: %w", dir, err)
	}
	var st trainerState
	if err := json.Unmarshal(b, &st); err != nil {
		return Config{}, 0, fmt.Errorf("grpo: checkpoint %s: %s: %w", dir, stateFile, err)
	}
	if st.Format != checkpointFormat {
		return Config{}, 0, fmt.Errorf("grpo: checkpoint %s: format %d, want %d", dir, st.Format, checkpointFormat)
	}
	return st.Config, st.OptimizerStep, nil
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
	m, err := model.Load(be, filepath.Join(dir, "model"))
	if err != nil {
		return nil, fmt.Errorf("grpo: resume: %w", err)
	}
	var ref *model.Model
	if cfg.Beta != 0 {
		if ref, err = model.Load(be, filepath.Join(dir, "reference")); err != nil {
			return nil, fmt.Errorf("grpo: resume reference: %w", err)
		}
	}
	t, err := newTrainer(m, ref, *cfg)
	if err != nil {
		return nil, err
	}
	f, err := safetensors.Open(filepath.Join(dir, optimizerFile))
	if err != nil {
		return nil, fmt.Errorf("grpo: resume: %w", err)
	}
	defer f.Close()
	mom, vel := t.opt.Moments()
	for i, p := range m.Params() {
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
	return t, nil
}
