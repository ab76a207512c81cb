package training

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"

	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/trainer/device"
	"github.com/rlhost/rlhost/trainer/grpo"
	"github.com/rlhost/rlhost/trainer/hfconfig"
	"github.com/rlhost/rlhost/trainer/lora"
	"github.com/rlhost/rlhost/trainer/model"
	"github.com/rlhost/rlhost/trainer/safetensors"
	"github.com/rlhost/rlhost/trainer/serve"
	"github.com/rlhost/rlhost/trainer/tokenizer"
)

// Source says where the policy's weights come from: exactly one of a model
// directory, a preset to initialise at random (with a tokenizer file), or a
// checkpoint to resume.
type Source struct {
	ModelDir string
	// Init names an hfconfig preset; Tokenizer is the tokenizer.json the
	// fresh model's vocabulary is sized to; Seed seeds its weights.
	Init, Tokenizer string
	Seed            uint64
	// Checkpoint is a directory written by Engine.Checkpoint.
	Checkpoint string
	// Adapter, with ModelDir and without training, is a PEFT adapter
	// directory served on top of the model (rlhost eval).
	Adapter string
}

// Engine is the policy being trained: a model on the CPU backend, its GRPO
// trainer (nil when only serving), and the embedded server that samples
// from it for the run's episodes.
type Engine struct {
	Trainer *grpo.Trainer
	Model   *model.Model
	Tok     *tokenizer.Tokenizer
	Server  *serve.Server
	// BaseURL is the server's OpenAI base URL (ending in /v1); ModelName
	// is the name requests must carry.
	BaseURL, ModelName string
	// Device says which compute backend was chosen and why.
	Device string
	// Sync pushes the adapter to the server that samples the policy when
	// that is not Server (weights_sync); nil otherwise.
	Sync *LoRASync

	tokDir  string // directory holding tokenizer.json (+ tokenizer_config.json)
	stop    context.CancelFunc
	closer  func()
	version int // GRPO updates applied to the weights (see Version)
}

// EngineOptions configure Open.
type EngineOptions struct {
	Source    Source
	ModelName string
	Train     *Settings // nil: serve only (a dry run)
	MaxBatch  int       // sequences generated at once
	Logger    hclog.Logger
	// NoServe opens the model and trainer without a server (offline
	// training on recorded trajectories).
	NoServe bool
	// Version is the weights' version when they come from a checkpoint:
	// the GRPO updates applied before it (RunState.WeightsVersion).
	Version int
}

// checkFits refuses training settings the model cannot take, from the
// model's shape alone: max_seq_len past its positions, or an estimate over
// the memory available. train nil (serving only) always fits.
func checkFits(src Source, train *Settings) error {
	if train == nil {
		return nil
	}
	hf, err := shapeOf(src)
	if err != nil {
		return err
	}
	need, alt := train.GRPO, defaultLoRA() // alt: what the advice may offer instead
	if need.LoRA != nil {
		alt = nil
	}
	if w := train.Warmup; need.LoRA != nil && w != nil && !w.LoRA {
		// The warm-up fine-tunes every weight: that is the peak.
		need.LoRA, need.Beta = nil, 0
	}
	if mp := hf.MaxPositions; mp > 0 && need.MaxSeqLen > mp {
		return schema.Diagnostics{schema.Errorf([]string{"trainer", "max_seq_len"}, "",
			"%d is more than the model's max_position_embeddings (%d): set max_seq_len = %d or less", need.MaxSeqLen, mp, mp)}.Err()
	}
	if _, err := grpo.CheckMemory(hf, need, alt); err != nil {
		// The trainer block's sizes caused it, not the policy block
		// that opens the engine: the path says so.
		return schema.Diagnostics{schema.Errorf([]string{"trainer", "micro_batch"}, "", "%w", err)}.Err()
	}
	return nil
}

// Open loads or creates the model, the trainer and the server, and starts
// serving on a loopback port.
func Open(ctx context.Context, o EngineOptions) (e *Engine, err error) {
	// Refuse before allocating anything a run cannot finish with.
	if err := checkFits(o.Source, o.Train); err != nil {
		return nil, err
	}
	dev, prec := "auto", "fp32"
	if o.Train != nil {
		dev, prec = o.Train.Device, o.Train.Precision
	}
	be, chosen, err := device.OpenPrecision(dev, prec)
	if err != nil {
		return nil, err
	}
	e = &Engine{ModelName: o.ModelName, closer: be.Close, Device: chosen, version: o.Version}
	opened := e // the returns below set e to nil
	defer func() {
		if err != nil {
			opened.Close()
		}
	}()
	src := o.Source
	switch {
	case src.Checkpoint != "":
		weights, adapter, err := grpo.ModelDir(src.Checkpoint)
		if err != nil {
			return nil, err
		}
		e.tokDir = weights
		if o.Train == nil {
			if e.Model, err = model.Load(be, weights); err != nil {
				return nil, err
			}
			if adapter != "" {
				// Serve what the checkpoint trained: base + adapter.
				a, err := lora.Load(be, e.Model.Cfg, adapter)
				if err != nil {
					return nil, err
				}
				if err := e.Model.SetAdapter(a); err != nil {
					return nil, err
				}
			}
			break
		}
		cfg := o.Train.GRPO
		if e.Trainer, err = grpo.ResumeWith(be, src.Checkpoint, &cfg); err != nil {
			return nil, fmt.Errorf("resume from %s: %w", src.Checkpoint, err)
		}
		e.Model = e.Trainer.Model()
	case src.ModelDir != "":
		e.tokDir = src.ModelDir
		if e.Model, err = model.Load(be, src.ModelDir); err != nil {
			return nil, err
		}
		if src.Adapter != "" && o.Train == nil {
			a, err := lora.Load(be, e.Model.Cfg, src.Adapter)
			if err != nil {
				return nil, err
			}
			if err := e.Model.SetAdapter(a); err != nil {
				return nil, err
			}
		}
	default:
		cfg, err := hfconfig.Preset(src.Init)
		if err != nil {
			return nil, err
		}
		e.tokDir = filepath.Dir(src.Tokenizer)
		tok, err := tokenizer.Load(src.Tokenizer)
		if err != nil {
			return nil, err
		}
		// The vocabulary is the tokenizer's: a fresh model has no reason to
		// carry rows no token can reach.
		cfg.VocabSize = tok.VocabSize()
		cfg.EOSTokenIDs = []int{tok.EOS()}
		if id, ok := tok.TokenID("<|im_end|>"); ok {
			cfg.EOSTokenIDs = []int{id}
		}
		if e.Model, err = model.New(be, cfg); err != nil {
			return nil, err
		}
		e.Model.Init(src.Seed, 0.02)
	}
	if e.Tok == nil {
		if e.Tok, err = loadTokenizer(e.tokDir, src.Tokenizer); err != nil {
			return nil, err
		}
	}
	if e.Model.Cfg.VocabSize < e.Tok.VocabSize() {
		return nil, fmt.Errorf("model vocabulary %d is smaller than its tokenizer's %d", e.Model.Cfg.VocabSize, e.Tok.VocabSize())
	}
	if o.Train != nil && e.Trainer == nil {
		if e.Trainer, err = grpo.New(e.Model, o.Train.GRPO); err != nil {
			return nil, err
		}
	}
	maxLen := 0
	if o.Train != nil {
		maxLen = o.Train.GRPO.MaxSeqLen
	}
	if mp := e.Model.Cfg.MaxPositions; maxLen == 0 || (mp > 0 && maxLen > mp) {
		maxLen = mp
	}
	if o.NoServe {
		return e, nil
	}
	so := serve.Options{ModelName: o.ModelName, MaxBatch: o.MaxBatch, MaxSeqLen: maxLen, Logger: o.Logger}
	if o.Train != nil {
		so.Deterministic = o.Train.Deterministic
	}
	if e.Server, err = serve.New(e.Model, e.Tok, so); err != nil {
		return nil, err
	}
	sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	e.stop = stop
	if e.BaseURL, err = e.Server.Listen(sctx, "127.0.0.1:0"); err != nil {
		return nil, err
	}
	// The server names the version in every response it gives.
	if err := e.Server.UpdateVersion(ctx, func(uint64) (uint64, error) { return uint64(e.version), nil }); err != nil {
		return nil, err
	}
	return e, nil
}

// shapeOf reads the model config a source will load, for the memory
// estimate.
func shapeOf(src Source) (*hfconfig.Config, error) {
	switch {
	case src.Checkpoint != "":
		weights, _, err := grpo.ModelDir(src.Checkpoint)
		if err != nil {
			return nil, err
		}
		return hfconfig.Load(filepath.Join(weights, "config.json"))
	case src.ModelDir != "":
		return hfconfig.Load(filepath.Join(src.ModelDir, "config.json"))
	}
	cfg, err := hfconfig.Preset(src.Init)
	if err != nil {
		return nil, err
	}
	if tok, err := tokenizer.Load(src.Tokenizer); err == nil {
		cfg.VocabSize = tok.VocabSize()
	}
	return cfg, nil
}

// loadTokenizer reads dir's tokenizer (and its config), or file.
func loadTokenizer(dir, file string) (*tokenizer.Tokenizer, error) {
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err == nil {
		return tokenizer.LoadDir(dir)
	}
	if file != "" {
		return tokenizer.Load(file)
	}
	return nil, fmt.Errorf("no tokenizer.json in %s", dir)
}

// SaveModel writes the current weights in Hugging Face layout with the
// tokenizer files beside them, so the directory loads into rlhost,
// transformers and vLLM. A model with a LoRA adapter is written merged
// (the model in memory is unchanged).
func (e *Engine) SaveModel(dir string, dt safetensors.DType) error {
	if a := e.Model.Adapter(); a != nil {
		if err := lora.SaveMerged(e.Model, a, dir, dt); err != nil {
			return err
		}
	} else if err := e.Model.Save(dir, dt); err != nil {
		return err
	}
	return e.copyTokenizer(dir)
}

// SaveAdapter writes the model's LoRA adapter in PEFT layout (it returns
// false when the model has none), naming the base's directory as
// base_model_name_or_path. A base with no directory of its own (a preset
// model, or one a full warm-up changed) is first written to baseDir, with
// the tokenizer, so the adapter has a base to load onto.
func (e *Engine) SaveAdapter(dir, baseDir string) (bool, error) {
	a := e.Model.Adapter()
	if a == nil {
		return false, nil
	}
	base := e.Model.Dir()
	if base == "" {
		if err := e.Model.Save(baseDir, safetensors.F32); err != nil {
			return true, err
		}
		if err := e.copyTokenizer(baseDir); err != nil {
			return true, err
		}
		base = baseDir
	}
	if abs, err := filepath.Abs(base); err == nil {
		base = abs
	}
	return true, lora.Save(a, dir, base)
}

func (e *Engine) copyTokenizer(dir string) error {
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json"} {
		dst := filepath.Join(dir, name)
		if _, err := os.Stat(dst); err == nil {
			continue
		}
		err := model.CopyFile(filepath.Join(e.tokDir, name), dst)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("copy %s: %w", name, err)
		}
	}
	return nil
}

// Version is the version of the weights: the GRPO updates applied to them
// since the model was loaded or created (a resumed run's count goes on
// from its checkpoint's). The embedded server reports it with every
// response, and each turn of a trajectory records it; a warm-up does not
// count.
func (e *Engine) Version() int { return e.version }

// Exclusive runs fn while no generation is in flight, so fn may read or
// change the weights. The weights keep their version unless fn reports
// that it applied a GRPO update, which makes them one version newer.
func (e *Engine) Exclusive(ctx context.Context, fn func() error) error {
	return e.Update(ctx, func() (bool, error) { return false, fn() })
}

// Update is Exclusive for a training step: fn reports whether it changed
// the weights (an update the trainer skipped leaves them as they were).
func (e *Engine) Update(ctx context.Context, fn func() (changed bool, err error)) error {
	step := func(v int) (int, error) {
		changed, err := fn()
		if changed {
			v++
		}
		return v, err
	}
	if e.Server == nil {
		v, err := step(e.version)
		e.version = v
		return err
	}
	return e.Server.UpdateVersion(ctx, func(cur uint64) (uint64, error) {
		v, err := step(e.version)
		e.version = v
		return uint64(v), err
	})
}

// Checkpoint writes everything a resume needs under dir: the trainer's
// state (dir/model holds the weights in HF layout, to which the tokenizer
// files are added, so it also loads as a model directory; with LoRA,
// dir/adapter holds the adapter and dir/model exists only for a base that
// has no directory of its own).
func (e *Engine) Checkpoint(dir string) error {
	if err := e.Trainer.Save(dir); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "model")); err != nil {
		return nil
	}
	return e.copyTokenizer(filepath.Join(dir, "model"))
}

// Close stops the server and frees the backend. A nil Engine (what a
// failed Open returns) has nothing to close.
func (e *Engine) Close() {
	if e == nil {
		return
	}
	if e.Server != nil {
		_ = e.Server.Close()
	}
	if e.stop != nil {
		e.stop()
	}
	if e.closer != nil {
		e.closer()
	}
}
