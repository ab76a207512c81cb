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

// PolicyOptions configure OpenPolicy.
type PolicyOptions struct {
	Train      *Settings // nil: serve only
	Checkpoint string    // resume from this checkpoint instead of the block's model
	Adapter    string    // serve the block's model with this PEFT adapter (no training)
	Logger     hclog.Logger
	// For a policy served by vLLM (weights_sync): the run's output
	// directory (adapters go under it by default), its id (adapter names
	// start with it), and the step a resumed run starts at.
	OutDir, RunID string
	ResumeStep    int
	// ResumeVersion is the resumed checkpoint's weights version
	// (RunState.Version).
	ResumeVersion int
}

// Opens reports whether OpenPolicy builds the policy of a block of
// provider for a run with training settings train (nil: a dry run): the
// embedded server always, a vLLM server when the run trains its adapter.
func Opens(provider string, train *Settings) bool {
	return provider == ProviderName || (provider == VLLMProviderName && train != nil && train.Sync != nil)
}

// OpenPolicy builds the policy of a run's policy block cfg and the
// engine behind it, which the caller closes:
//   - provider "embedded": the engine (model, trainer unless o.Train is
//     nil, and the server sampling its weights) and an OpenAI-protocol
//     policy pointed at that server, asking for token ids;
//   - provider "vllm" in a run that trains: the engine without a server
//     (the base model and the adapter being trained), with the adapter
//     sync attached, and the vllm policy.
//
// Errors carry the diagnostics of the setting at fault (the policy
// block's, or the trainer block's under path "trainer").
func OpenPolicy(ctx context.Context, cfg policy.Config, baseDir string, o PolicyOptions) (*Engine, policy.Policy, error) {
	switch {
	case cfg.Provider == ProviderName:
		return openEmbedded(ctx, cfg, baseDir, o)
	case Opens(cfg.Provider, o.Train):
		return openVLLM(ctx, cfg, baseDir, o)
	}
	return nil, nil, fmt.Errorf("policy %q: provider %q has no engine to open", cfg.Name, cfg.Provider)
}

// CheckPolicy checks what OpenPolicy would refuse without loading a model
// (rlhost validate), and returns the policy pre-flight checks: the
// vllm one, or a stand-in for the embedded server, which starts with the
// run.
func CheckPolicy(cfg policy.Config, baseDir string, train *Settings) (policy.Policy, error) {
	if cfg.Provider != ProviderName {
		return policy.NewVLLM(cfg, baseDir)
	}
	src, err := source(cfg, baseDir)
	if err != nil {
		return nil, err
	}
	if err := checkFits(src, train); err != nil {
		return nil, err
	}
	return checkOnly{}, nil
}

// openEmbedded opens the engine and serves it on loopback.
func openEmbedded(ctx context.Context, cfg policy.Config, baseDir string, o PolicyOptions) (*Engine, policy.Policy, error) {
	src, err := source(cfg, baseDir)
	if err != nil {
		return nil, nil, err
	}
	if o.Checkpoint != "" {
		src = Source{Checkpoint: o.Checkpoint, Tokenizer: src.Tokenizer}
	}
	src.Adapter = o.Adapter
	maxBatch := 16
	if cfg.MaxBatch != nil {
		if *cfg.MaxBatch < 1 {
			return nil, nil, cfg.AttributeError("max_batch", "%d, want >= 1", *cfg.MaxBatch)
		}
		maxBatch = *cfg.MaxBatch
	}
	e, err := Open(ctx, EngineOptions{Source: src, ModelName: cfg.Name, Train: o.Train, MaxBatch: maxBatch, Logger: o.Logger, Version: o.ResumeVersion})
	if err != nil {
		// Diagnostics inside err (the trainer block's) keep their paths;
		// the caller names the policy block.
		return nil, nil, err
	}
	oc := cfg
	oc.Provider = "openai"
	oc.BaseURL, oc.Model = &e.BaseURL, &cfg.Name
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
		return nil, nil, err
	}
	return e, p, nil
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
