package training

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/host/config"
	"github.com/rlhost/rlhost/host/output"
	"github.com/rlhost/rlhost/host/policy"
	"github.com/rlhost/rlhost/host/runner"
	"github.com/rlhost/rlhost/trainer/grpo"
)

// Training a policy that another server samples (provider "vllm"): the
// trainer holds the base model and a LoRA adapter, and after every update
// writes the adapter in PEFT layout where the server can read it and
// hot-loads it there under a new name (weights_sync = "lora").

// VLLMProviderName is the provider of a policy served by vLLM.
const VLLMProviderName = "vllm"

// Defaults of the weight-sync settings.
const (
	// AdaptersDir is where adapters go under the output directory when
	// adapter_dir is not set.
	AdaptersDir = "adapters"
	// DefaultRatioWarn: warn when the mean |log importance ratio| between
	// the trainer's and the server's log-probs is above this.
	DefaultRatioWarn = 0.1
)

// WeightsSync is the trainer block's weight-sync settings.
type WeightsSync struct {
	Mode string // "lora"
	// Model is the base model directory the trainer loads: the same
	// weights the server serves.
	Model string
	// AdapterDir is where each step's adapter is written; "" means
	// OUT/adapters. The server must read the same path.
	AdapterDir string
	// RatioWarn is the mean |log importance ratio| past which each step
	// warns (importance_ratio_warn).
	RatioWarn float64
}

// syncSettings are the trainer block's weight-sync attributes.
var syncSettings = []string{"weights_sync", "model", "adapter_dir", "importance_ratio_warn"}

// decodeSync reads the weight-sync attributes from given (raw JSON by
// name) and checks them against the run's policy provider.
func decodeSync(f *config.File, given map[string]json.RawMessage) (*WeightsSync, hcl.Diagnostics) {
	tb := f.Trainer
	var diags hcl.Diagnostics
	bad := func(name, detail string) {
		diags = append(diags, attrDiag(tb, name, "Invalid trainer setting", detail))
	}
	provider := ""
	if pb := f.Policy(); pb != nil {
		provider = pb.Provider
	}
	_, hasSync := given["weights_sync"]
	if !hasSync {
		for _, name := range syncSettings[1:] {
			if _, ok := given[name]; ok {
				bad(name, fmt.Sprintf("%s is a weights_sync setting: it is only used with weights_sync = \"lora\"", name))
			}
		}
		if provider == VLLMProviderName && len(diags) == 0 {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Training needs a weight sync",
				Detail:  fmt.Sprintf("The policy is served by vLLM (provider = %q): set weights_sync = \"lora\" (with a lora block and the base model directory in model) so each step's adapter is loaded into the server. See docs/vllm.md.", VLLMProviderName),
				Subject: tb.DefRange.Ptr()})
		}
		return nil, diags
	}
	s := &WeightsSync{RatioWarn: DefaultRatioWarn}
	for name, dst := range map[string]any{"weights_sync": &s.Mode, "model": &s.Model, "adapter_dir": &s.AdapterDir, "importance_ratio_warn": &s.RatioWarn} {
		if raw, ok := given[name]; ok {
			if err := json.Unmarshal(raw, dst); err != nil {
				bad(name, fmt.Sprintf("%s: %v", name, typeError(err)))
			}
		}
	}
	if diags.HasErrors() {
		return nil, diags
	}
	switch {
	case s.Mode != "lora":
		bad("weights_sync", fmt.Sprintf("weights_sync %q is not supported: the one way is \"lora\" (the adapter is hot-loaded into the server)", s.Mode))
	case provider == ProviderName:
		bad("weights_sync", fmt.Sprintf("the %q policy samples the weights being trained in-process, so there is nothing to sync; weights_sync is for a policy served by vLLM (provider = %q)", ProviderName, VLLMProviderName))
	case provider != VLLMProviderName:
		bad("weights_sync", fmt.Sprintf("weights_sync = \"lora\" loads adapters through vLLM's runtime LoRA API, which provider %q does not have; use provider = %q", provider, VLLMProviderName))
	}
	if s.Model == "" {
		bad("weights_sync", "weights_sync = \"lora\" needs model: the Hugging Face directory of the base model the server serves, which the trainer loads")
	} else {
		if !filepath.IsAbs(s.Model) {
			s.Model = filepath.Join(f.Dir, s.Model)
		}
		if _, err := os.Stat(filepath.Join(s.Model, "config.json")); err != nil {
			bad("model", fmt.Sprintf("%s is not a Hugging Face model directory (no config.json)", s.Model))
		}
	}
	if s.AdapterDir != "" && !filepath.IsAbs(s.AdapterDir) {
		s.AdapterDir = filepath.Join(f.Dir, s.AdapterDir)
	}
	if !(s.RatioWarn > 0) || math.IsInf(s.RatioWarn, 0) {
		bad("importance_ratio_warn", fmt.Sprintf("importance_ratio_warn %g must be positive", s.RatioWarn))
	}
	return s, diags
}

// LoRASync pushes each step's adapter to the server.
type LoRASync struct {
	Policy policy.Adapters
	// Dir holds one PEFT directory per pushed adapter.
	Dir string
	// Prefix names the adapters: PREFIX-step-N.
	Prefix string
	// Save writes the trainer's current adapter to a directory in PEFT
	// layout.
	Save func(dir string) error
	// Keep is how many adapter directories to keep, newest first (at
	// least 2): requests still running may name an older adapter, which a
	// server that restarted must load again.
	Keep int

	pushed []string // directories, oldest first
}

// AdapterName is the adapter name of the weights after step updates.
func (s *LoRASync) AdapterName(step int) string {
	return fmt.Sprintf("%s-step-%d", s.Prefix, step)
}

// Push writes the adapter as it is after step steps, whose weights are
// version version (the GRPO updates applied), and makes the servers use
// it. The directories of all but the newest Keep adapters are removed
// (an older one may still be reloaded for a request in flight).
func (s *LoRASync) Push(ctx context.Context, step, version int) (string, error) {
	name := s.AdapterName(step)
	dir := filepath.Join(s.Dir, name)
	if err := os.RemoveAll(dir); err != nil {
		return "", fmt.Errorf("adapter %s: %w", name, err)
	}
	if err := s.Save(dir); err != nil {
		return "", fmt.Errorf("write adapter %s: %w", name, err)
	}
	s.pushed = append(s.pushed, dir)
	err := s.Policy.SwitchAdapter(ctx, name, dir, version)
	if err != nil && s.Policy.Adapter() != name {
		return "", fmt.Errorf("load adapter %s from %s: %w", name, dir, err)
	}
	for len(s.pushed) > max(2, s.Keep) {
		_ = os.RemoveAll(s.pushed[0])
		s.pushed = s.pushed[1:]
	}
	// The switch is done; a previous adapter the server had already
	// forgotten is no failure.
	if err != nil && !errors.Is(err, policy.ErrUnknownAdapter) {
		return name, err
	}
	return name, nil
}

// syncedPolicy is the vllm policy of a training run: its preflight also
// confirms the adapter routes, and loads the resumed adapter.
type syncedPolicy struct {
	*policy.VLLM
	sync *LoRASync
	// resumeStep is the checkpoint's next step when resuming (its adapter
	// is pushed before any rollout), else 0; resumeVersion its weights'
	// version.
	resumeStep, resumeVersion int
}

var _ policy.Checker = syncedPolicy{}

func (p syncedPolicy) Check(ctx context.Context, notify func(string)) error {
	if err := p.VLLM.Check(ctx, notify); err != nil {
		return err
	}
	if err := p.VLLM.CheckAdapterAPI(ctx); err != nil {
		return err
	}
	if p.resumeStep > 0 {
		if _, err := p.sync.Push(ctx, p.resumeStep, p.resumeVersion); err != nil {
			return fmt.Errorf("loading the resumed adapter: %w", err)
		}
	}
	return nil
}

// openVLLM opens the trainer of a policy vLLM serves (base model plus
// adapter, no server), attaches the adapter sync to it, and returns the
// vllm policy whose pre-flight also loads a resumed run's adapter.
func openVLLM(ctx context.Context, cfg policy.Config, baseDir string, o PolicyOptions) (*Engine, policy.Policy, error) {
	v, err := policy.NewVLLM(cfg, baseDir)
	if err != nil {
		return nil, nil, err
	}
	src := Source{ModelDir: o.Train.Sync.Model}
	if o.Checkpoint != "" {
		src = Source{Checkpoint: o.Checkpoint}
	}
	e, err := Open(ctx, EngineOptions{Source: src, ModelName: cfg.Name, Train: o.Train, NoServe: true, Logger: o.Logger, Version: o.ResumeVersion})
	if err != nil {
		v.Close()
		return nil, nil, fmt.Errorf("policy %q: %w", cfg.Name, err)
	}
	dir := o.Train.Sync.AdapterDir
	if dir == "" {
		dir = filepath.Join(o.OutDir, AdaptersDir)
	}
	// The server resolves lora_path from its own working directory.
	if dir, err = filepath.Abs(dir); err != nil {
		e.Close()
		v.Close()
		return nil, nil, err
	}
	prefix := o.RunID
	if prefix == "" {
		prefix = cfg.Name
	}
	e.Sync = &LoRASync{Policy: v, Dir: dir, Prefix: prefix, Save: e.saveAdapter, Keep: o.Train.MaxOffPolicySteps + 2}
	return e, syncedPolicy{VLLM: v, sync: e.Sync, resumeStep: o.ResumeStep, resumeVersion: o.ResumeVersion}, nil
}

// saveAdapter writes the engine's adapter for LoRASync.
func (e *Engine) saveAdapter(dir string) error {
	if e.Model.Dir() == "" {
		return fmt.Errorf("the trainer's base weights no longer match the model directory the server serves")
	}
	// The base is the server's own model directory, never a copy.
	ok, err := e.SaveAdapter(dir, "")
	if err == nil && !ok {
		err = fmt.Errorf("the trainer has no LoRA adapter (weights_sync = \"lora\" needs a lora block)")
	}
	return err
}

// retokenize fills in the ids of text-only turns (see Retokenize) and
// records what it did.
func (k *Sink) retokenize(trajs []core.Trajectory, extra map[string]float64) []core.Trajectory {
	out, r := Retokenize(k.Engine.Tok, trajs)
	if r.Turns > 0 {
		output.Retokenized{Turns: float64(r.Turns), Mismatched: float64(r.Mismatched)}.Put(extra)
	}
	if r.Mismatched > 0 {
		k.logf("%d turns came back as text only and retokenising %d of them did not give the tokens the server sampled; %d episodes left out of training (first: %s)",
			r.Turns, r.Mismatched, r.Dropped, r.First)
	}
	return out
}

// warnDrift warns when the trainer's and the sampler's log-probs drift
// apart: when the mean |log ratio| (train/sample_logprob_diff) passes the
// threshold. The mean ratio itself cannot tell, since its expectation
// under the sampler is 1 whatever the drift.
func (k *Sink) warnDrift(step int, s grpo.Stats) {
	if s.SampleRatioMax == 0 {
		return // no sampling log-probs
	}
	warn := DefaultRatioWarn
	if k.Settings.Sync != nil {
		warn = k.Settings.Sync.RatioWarn
	}
	if k.Settings.MaxOffPolicySteps > 0 {
		// Rollouts ahead of training drift by design; the
		// importance-sampling correction weighs it.
		return
	}
	if s.SampleLogProbDiff > warn {
		k.logf("step %d: the trainer's log-probs drift from the server's: mean |log ratio| %.4f is above importance_ratio_warn %g (ratio mean %.3f, max %.2f, %.1f%% outside the sampling clip range); a different chat template, tokenizer, dtype or adapter on the server shows here first",
			step, s.SampleLogProbDiff, warn, s.SampleRatioMean, s.SampleRatioMax, 100*s.SampleRatioClipped)
	}
}

// push writes the adapter the step's update produced and loads it into
// the servers; the next requests name it.
func (k *Sink) push(ctx context.Context, st *runner.Step) error {
	start := time.Now()
	version := k.Engine.Version()
	name, err := k.Engine.Sync.Push(ctx, st.Index+1, version)
	if err != nil {
		return fmt.Errorf("step %d: the server did not take the new adapter: %w", st.Index, err)
	}
	output.Sync{WeightsVersion: float64(version), Seconds: time.Since(start).Seconds()}.Put(st.Metrics.Extra)
	if k.Logger != nil {
		k.Logger.Debug("adapter loaded", "name", name)
	}
	return nil
}
