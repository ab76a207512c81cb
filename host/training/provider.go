package training

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/hcl/v2/gohcl"

	"github.com/rlhost/rlhost/host/config"
	"github.com/rlhost/rlhost/host/policy"
)

// ProviderName is the policy provider of the trainer's own server.
const ProviderName = "embedded"

// ProviderOptions configure Provider.
type ProviderOptions struct {
	Train      *Settings // nil: serve only
	Checkpoint string    // resume from this checkpoint instead of the block's model
	Adapter    string    // serve the block's model with this PEFT adapter (no training)
	Logger     hclog.Logger
	// CheckOnly validates the block and its files without loading the
	// model (rlhost validate).
	CheckOnly bool
	// For a policy served by vLLM (weights_sync): the run's output
	// directory (adapters go under it by default), its id (adapter names
	// start with it), and the step a resumed run starts at.
	OutDir, RunID string
	ResumeStep    int
}

// Provider makes providers "embedded" and "vllm" known to policy.New
// (vllm: see vllmProvider). The embedded factory
// opens the engine (model, trainer, server) and returns an OpenAI-protocol
// policy pointed at the server, asking for token ids; the engine is left
// in *slot for the caller, who closes it.
func Provider(ctx context.Context, slot **Engine, o ProviderOptions) policy.Option {
	embedded := embeddedProvider(ctx, slot, o)
	vllm := vllmProvider(ctx, slot, o)
	return func(m map[string]policy.Factory) {
		embedded(m)
		vllm(m)
	}
}

func embeddedProvider(ctx context.Context, slot **Engine, o ProviderOptions) policy.Option {
	return policy.WithProvider(ProviderName, func(cfg policy.Config, baseDir string) (policy.Policy, error) {
		src, err := source(cfg, baseDir)
		if err != nil {
			return nil, err
		}
		if o.CheckOnly {
			return checkOnly{}, nil
		}
		if o.Checkpoint != "" {
			src = Source{Checkpoint: o.Checkpoint, Tokenizer: src.Tokenizer}
		}
		src.Adapter = o.Adapter
		name := cfg.Name
		maxBatch := 16
		if cfg.MaxBatch != nil {
			if *cfg.MaxBatch < 1 {
				return nil, cfg.AttributeError("max_batch", "%d, want >= 1", *cfg.MaxBatch)
			}
			maxBatch = *cfg.MaxBatch
		}
		e, err := Open(ctx, EngineOptions{Source: src, ModelName: name, Train: o.Train, MaxBatch: maxBatch, Logger: o.Logger})
		if err != nil {
			// Diagnostics inside err (the trainer block's) keep their paths.
			return nil, fmt.Errorf("policy %q: %w", cfg.Name, err)
		}
		oc := cfg
		oc.Provider = "openai"
		oc.BaseURL, oc.Model = &e.BaseURL, &name
		oc.Init, oc.Tokenizer, oc.InitSeed, oc.MaxBatch = nil, nil, nil, nil
		yes := true
		oc.ReturnTokenIDs = &yes
		if oc.Temperature == nil {
			one := 1.0
			oc.Temperature = &one
		}
		p, err := policy.NewOpenAI(oc, baseDir)
		if err != nil {
			e.Close()
			return nil, err
		}
		*slot = e
		return p, nil
	})
}

// SourceOf is where an embedded policy block's weights come from.
func SourceOf(cfg policy.Config, baseDir string) (Source, error) { return source(cfg, baseDir) }

// source checks the block's model settings: exactly one of model and init
// (with tokenizer), paths relative to the job file, and no setting the
// embedded server does not use.
func source(cfg policy.Config, baseDir string) (Source, error) {
	attrErr := cfg.AttributeError
	for _, bad := range []struct {
		set  bool
		name string
	}{{cfg.BaseURL != nil, "base_url"}, {cfg.APIKeyEnv != nil, "api_key_env"}, {cfg.File != nil, "file"}, {cfg.ReturnTokenIDs != nil, "return_token_ids"}} {
		if bad.set {
			return Source{}, attrErr(bad.name, "not used by provider %q (the server runs inside rlhost)", ProviderName)
		}
	}
	rel := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(baseDir, p)
	}
	var src Source
	switch {
	case cfg.Model != nil && cfg.Init != nil:
		return Source{}, attrErr("init", "set either model (a model directory) or init (a fresh model), not both")
	case cfg.Model != nil && *cfg.Model == "":
		return Source{}, attrErr("model", "empty: name the Hugging Face model directory to serve and train (for example --var model=DIR)")
	case cfg.Model != nil:
		src.ModelDir = rel(*cfg.Model)
		if _, err := os.Stat(filepath.Join(src.ModelDir, "config.json")); err != nil {
			return Source{}, attrErr("model", "%s is not a Hugging Face model directory (no config.json): %v", src.ModelDir, err)
		}
		if cfg.InitSeed != nil {
			return Source{}, attrErr("init_seed", "only used with init")
		}
	case cfg.Init != nil:
		src.Init = *cfg.Init
		if cfg.Tokenizer == nil {
			return Source{}, attrErr("tokenizer", "required with init: the tokenizer.json the fresh model is sized to")
		}
		if cfg.InitSeed != nil {
			src.Seed = uint64(*cfg.InitSeed)
		}
	default:
		return Source{}, attrErr("model", "required for provider %q: a Hugging Face model directory (or init = \"PRESET\" with tokenizer)", ProviderName)
	}
	if cfg.Tokenizer != nil {
		src.Tokenizer = rel(*cfg.Tokenizer)
		if _, err := os.Stat(src.Tokenizer); err != nil {
			return Source{}, attrErr("tokenizer", "%v", err)
		}
	}
	return src, nil
}

// checkOnly stands in for the embedded policy during validation.
type checkOnly struct{}

func (checkOnly) Complete(context.Context, policy.Request) (policy.Response, error) {
	return policy.Response{}, fmt.Errorf("the embedded policy is not started during validation")
}
func (checkOnly) Close() error { return nil }

// PolicyTemperature is the sampling temperature of the run's policy block
// (1 when unset), which training must compute log-probs at.
func PolicyTemperature(f *config.File) float64 {
	pb := f.Policy()
	if pb == nil {
		return 1
	}
	var cfg policy.Config
	if gohcl.DecodeBody(pb.Body, f.EvalContext, &cfg).HasErrors() || cfg.Temperature == nil {
		return 1
	}
	return *cfg.Temperature
}
