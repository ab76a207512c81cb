package eval

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/hcl/v2/gohcl"

	"github.com/rlhost/rlhost/core/suggest"
	"github.com/rlhost/rlhost/host/config"
	"github.com/rlhost/rlhost/host/policy"
	"github.com/rlhost/rlhost/host/training"
	"github.com/rlhost/rlhost/trainer/grpo"
	"github.com/rlhost/rlhost/trainer/lora"
)

// Kinds of policy a Spec names.
const (
	KindBlock      = "block"      // a policy block of the job file
	KindModel      = "model"      // a Hugging Face model directory
	KindCheckpoint = "checkpoint" // a training checkpoint (checkpoints/step-N)
	KindAdapter    = "adapter"    // a PEFT LoRA adapter directory
	KindEndpoint   = "endpoint"   // an OpenAI-compatible server
)

// Spec is one policy to evaluate, as --policy names it: [LABEL=]SOURCE.
type Spec struct {
	Label  string // its name in the report
	Source string // as given
	Kind   string
	Path   string // the directory, block name or URL it resolved to
}

// ParseSpec resolves "[LABEL=]SOURCE": a URL (http:// or https://) is an
// endpoint; a name of one of the job's policy blocks is that block;
// otherwise SOURCE is a directory: a training checkpoint
// (trainer_state.json), a LoRA adapter (adapter_config.json), a model
// (config.json), or a training run's output directory (its final/ model).
func ParseSpec(s string, f *config.File) (Spec, error) {
	label, source, ok := strings.Cut(s, "=")
	if !ok || strings.Contains(label, "/") || strings.Contains(label, ":") {
		label, source = "", s
	}
	if source == "" {
		return Spec{}, fmt.Errorf("--policy %q names nothing", s)
	}
	sp := Spec{Label: label, Source: source, Path: source}
	if sp.Label == "" {
		sp.Label = source
	}
	if strings.HasPrefix(source, "http://") || strings.HasPrefix(source, "https://") {
		sp.Kind = KindEndpoint
		return sp, nil
	}
	var blocks []string
	for _, p := range f.Policies {
		if p.Name == source {
			sp.Kind = KindBlock
			return sp, nil
		}
		blocks = append(blocks, p.Name)
	}
	st, err := os.Stat(source)
	if err != nil || !st.IsDir() {
		hint := ""
		if c := suggest.Closest(source, blocks); c != "" {
			hint = fmt.Sprintf("; did you mean the policy block %q?", c)
		}
		return Spec{}, fmt.Errorf("--policy %q is neither a policy block of %s (%s), a directory, nor an http(s) URL%s",
			source, f.Path, strings.Join(blocks, ", "), hint)
	}
	has := func(dir, name string) bool {
		_, err := os.Stat(filepath.Join(dir, name))
		return err == nil
	}
	// A directory on the command line is relative to the working
	// directory; the policy blocks' paths are relative to the job file.
	if abs, err := filepath.Abs(source); err == nil {
		sp.Path = abs
	}
	switch {
	case has(source, "trainer_state.json"):
		sp.Kind = KindCheckpoint
	case has(source, lora.ConfigFile):
		sp.Kind = KindAdapter
	case has(source, "config.json"):
		sp.Kind = KindModel
	case has(filepath.Join(source, training.FinalDir), "config.json"):
		sp.Kind, sp.Path = KindModel, filepath.Join(sp.Path, training.FinalDir)
	default:
		return Spec{}, fmt.Errorf("--policy %s is not a model directory (config.json), a checkpoint (trainer_state.json), a LoRA adapter (adapter_config.json) or a training run's output directory (final/)", source)
	}
	return sp, nil
}

// OpenOptions configure Open.
type OpenOptions struct {
	Model     string // the model an endpoint serves
	APIKeyEnv string // the variable holding an endpoint's key ("": none)
	Logger    hclog.Logger
}

// Open builds the policy sp names. A block is built as the job builds it;
// a directory is served by rlhost's own server (as provider "embedded")
// and an endpoint asked as provider "openai", both with the sampling
// settings (temperature, top_p, max_tokens, stop, ...) of the job's run
// policy, so that every policy is measured the same way. The returned
// function closes what Open started.
func Open(ctx context.Context, f *config.File, sp Spec, o OpenOptions) (policy.Policy, func(), error) {
	po := training.PolicyOptions{Logger: o.Logger}
	var cfg policy.Config
	var err error
	if sp.Kind == KindBlock {
		if cfg, err = blockConfig(f, sp.Path); err != nil {
			return nil, nil, err
		}
	} else if cfg, err = samplingConfig(f); err != nil {
		return nil, nil, err
	}
	cfg.Name = sp.Label
	switch sp.Kind {
	case KindEndpoint:
		if o.Model == "" {
			return nil, nil, fmt.Errorf("--policy %s is an endpoint: name the model it serves with --model", sp.Source)
		}
		cfg.Provider, cfg.BaseURL, cfg.Model = "openai", &sp.Path, &o.Model
		if o.APIKeyEnv != "" {
			cfg.APIKeyEnv = &o.APIKeyEnv
		}
	case KindModel:
		cfg.Provider, cfg.Model = training.ProviderName, &sp.Path
	case KindCheckpoint:
		weights, _, err := grpo.ModelDir(sp.Path)
		if err != nil {
			return nil, nil, err
		}
		cfg.Provider, cfg.Model = training.ProviderName, &weights
		po.Checkpoint = sp.Path
	case KindAdapter:
		lc, err := lora.ReadConfig(sp.Path)
		if err != nil {
			return nil, nil, err
		}
		base := lc.BaseModel
		if !filepath.IsAbs(base) {
			base = filepath.Join(sp.Path, base)
		}
		cfg.Provider, cfg.Model = training.ProviderName, &base
		po.Adapter = sp.Path
	}
	if !training.Opens(cfg.Provider, nil) {
		p, err := policy.New(cfg, f.Dir)
		if err != nil {
			return nil, nil, err
		}
		return p, func() { _ = p.Close() }, nil
	}
	eng, p, err := training.OpenPolicy(ctx, cfg, f.Dir, po)
	if err != nil {
		return nil, nil, err
	}
	return p, func() { _ = p.Close(); eng.Close() }, nil
}

// blockConfig decodes the job's policy block name.
func blockConfig(f *config.File, name string) (policy.Config, error) {
	for _, pb := range f.Policies {
		if pb.Name != name {
			continue
		}
		var cfg policy.Config
		if diags := gohcl.DecodeBody(pb.Body, f.EvalContext, &cfg); diags.HasErrors() {
			return cfg, fmt.Errorf("policy %q: %s", name, diags.Error())
		}
		return cfg, nil
	}
	return policy.Config{}, fmt.Errorf("no policy block %q", name)
}

// samplingConfig is the run policy's sampling and request settings, with
// no provider or model.
func samplingConfig(f *config.File) (policy.Config, error) {
	var run policy.Config
	if pb := f.Policy(); pb != nil {
		var err error
		if run, err = blockConfig(f, pb.Name); err != nil {
			return run, err
		}
	}
	return policy.Config{
		Temperature: run.Temperature, TopP: run.TopP, MaxTokens: run.MaxTokens, Stop: run.Stop,
		Timeout: run.Timeout, MaxRetries: run.MaxRetries, BackoffBase: run.BackoffBase, BackoffMax: run.BackoffMax,
	}, nil
}
