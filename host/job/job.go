// Package job turns a loaded config into running parts: it starts the env
// and sandbox plugins, decodes each plugin's block against the schema the
// plugin declares, configures it, and builds the policy. `rlhost run`,
// `validate` and `sandbox` share it, so validation checks exactly what a run
// would use.
package job

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"

	"github.com/rlhost/rlhost/core/envplugin"
	"github.com/rlhost/rlhost/core/pluginbase"
	"github.com/rlhost/rlhost/core/sandboxplugin"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/host/config"
	"github.com/rlhost/rlhost/host/pluginmgr"
	"github.com/rlhost/rlhost/host/policy"
	"github.com/rlhost/rlhost/host/runner"
)

// Job is a config with its plugins started and configured.
type Job struct {
	File    *config.File
	RunID   string
	Mgr     *pluginmgr.Manager
	Env     *pluginmgr.Instance
	Backend *pluginmgr.Instance
	Policy  policy.Policy
}

// Options tune Prepare.
type Options struct {
	RunID          string
	PolicyProvider []policy.Option // extra providers (the trainer's embedded policy)
	SkipPolicy     bool
}

// Prepare starts and configures everything the run block uses. On error the
// returned diagnostics point at the config; whatever was started is stopped.
func Prepare(ctx context.Context, f *config.File, mgr *pluginmgr.Manager, o Options) (*Job, hcl.Diagnostics) {
	j := &Job{File: f, RunID: o.RunID, Mgr: mgr}
	var diags hcl.Diagnostics
	envBlock := f.Env()
	if envBlock == nil {
		return nil, hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "No env block", Detail: "A job needs an env block, e.g. env \"coding\" { sandbox = sandbox.local }."}}
	}
	// The env starts first: whether it needs a sandbox at all is its to say.
	env, d := StartEnv(ctx, f, envBlock, mgr, o.RunID)
	diags = append(diags, d...)
	if d.HasErrors() {
		return nil, diags
	}
	j.Env = env
	sb, d := f.SandboxFor(envBlock, !env.Info().NoSandbox)
	diags = append(diags, d...)
	if d.HasErrors() {
		j.Close(ctx)
		return nil, diags
	}
	if sb != nil {
		backend, d := StartBackend(ctx, f, sb, mgr, o.RunID)
		diags = append(diags, d...)
		if d.HasErrors() {
			j.Close(ctx)
			return nil, diags
		}
		j.Backend = backend
	}
	if !o.SkipPolicy {
		p, d := NewPolicy(f, o.PolicyProvider)
		diags = append(diags, d...)
		if d.HasErrors() {
			j.Close(ctx)
			return nil, diags
		}
		j.Policy = p
	}
	return j, diags
}

// Settings converts the run block into the runner's plain settings.
func Settings(r config.Run) runner.Settings {
	return runner.Settings{
		Steps: r.Steps, BatchSize: r.BatchSize, GroupSize: r.GroupSize, Seed: r.Seed,
		Concurrency: r.Concurrency, MaxTurns: r.MaxTurns, EpisodeTimeout: r.EpisodeTimeout,
	}
}

// Runner builds the runner for this job: the run block's settings, the
// env and sandbox blocks it uses, and the live plugin clients.
func (j *Job) Runner(out runner.Recorder) *runner.Runner {
	envBlock := j.File.Env()
	r := &runner.Runner{
		RunID: j.RunID, ConfigPath: j.File.Path, Settings: Settings(j.File.Run), EnvName: envBlock.Name,
		Env: j.Env.LiveEnv(), Policy: j.Policy, Out: out,
	}
	// An env that runs no commands gets no sandbox: no backend is started.
	if j.Backend != nil {
		sb := j.File.Sandbox(envBlock.Sandbox)
		r.Spec, r.ExecTimeout, r.Backend = sb.Spec, sb.ExecTimeout, j.Backend.LiveBackend()
	}
	return r
}

// SandboxLabel names the sandbox block and backend a job uses, for the
// lines a run and validate print.
func (j *Job) SandboxLabel() string {
	if j.Backend == nil {
		return "sandbox none (the env runs no commands)"
	}
	sb := j.File.Sandbox(j.File.Env().Sandbox)
	return fmt.Sprintf("sandbox %s (%s)", sb.Name, j.Backend.Info().Name)
}

// Close stops the plugins and the policy.
func (j *Job) Close(ctx context.Context) {
	if j.Policy != nil {
		_ = j.Policy.Close()
	}
	stop := func(in *pluginmgr.Instance) {
		if in != nil {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			in.Stop(sctx)
		}
	}
	stop(j.Env)
	stop(j.Backend)
}

// StartBackend starts and configures the backend plugin of sandbox block sb.
func StartBackend(ctx context.Context, f *config.File, sb *config.Sandbox, mgr *pluginmgr.Manager, runID string) (*pluginmgr.Instance, hcl.Diagnostics) {
	src, err := mgr.Resolve(pluginbase.KindSandbox, sb.PluginRef(), f.Dir)
	if err != nil {
		rng := sb.DefRange
		if r, ok := sb.AttrRanges["plugin"]; ok {
			rng = r
		} else if r, ok := sb.AttrRanges["backend"]; ok {
			rng = r
		}
		return nil, hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Cannot find sandbox backend", Detail: err.Error(), Subject: rng.Ptr()}}
	}
	var diags hcl.Diagnostics
	var mu sync.Mutex // setup runs again, on another goroutine, after each restart
	setup := func(ctx context.Context, raw any) error {
		mu.Lock()
		defer mu.Unlock()
		c, ok := raw.(*sandboxplugin.Client)
		if !ok {
			return fmt.Errorf("%s is not a sandbox backend", src)
		}
		info := c.Info()
		if err := config.CheckReserved(info.Config, config.ReservedSandboxSettings, info.Name); err != nil {
			return err
		}
		js, d := config.DecodePluginBody(sb.Body, info.Config, f.EvalContext, info.Name)
		diags = append(diags, d...)
		if d.HasErrors() {
			return fmt.Errorf("sandbox %q: invalid config", sb.Name)
		}
		pd := c.Configure(ctx, schema.Config{Name: sb.Name, JSON: js, BaseDir: f.Dir, RunID: runID}, sb.Spec)
		diags = append(diags, config.PluginDiagnostics(pd, info.Config, info.Name, sb.Body, sb.AttrRanges, sb.DefRange)...)
		if pd.HasErrors() {
			return fmt.Errorf("sandbox %q: rejected by plugin %s", sb.Name, info.Name)
		}
		return nil
	}
	in, err := mgr.Start(ctx, src, setup)
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		if !diags.HasErrors() {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Sandbox backend failed to start", Detail: err.Error(), Subject: sb.DefRange.Ptr()})
		}
		return nil, diags
	}
	return in, diags
}

// StartEnv starts and configures the plugin of env block e.
func StartEnv(ctx context.Context, f *config.File, e *config.Env, mgr *pluginmgr.Manager, runID string) (*pluginmgr.Instance, hcl.Diagnostics) {
	src, err := mgr.Resolve(pluginbase.KindEnv, e.Plugin, f.Dir)
	if err != nil {
		rng := e.DefRange
		if r, ok := e.AttrRanges["plugin"]; ok {
			rng = r
		}
		return nil, hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Cannot find env plugin", Detail: err.Error(), Subject: rng.Ptr()}}
	}
	var diags hcl.Diagnostics
	var mu sync.Mutex // setup runs again, on another goroutine, after each restart
	setup := func(ctx context.Context, raw any) error {
		mu.Lock()
		defer mu.Unlock()
		c, ok := raw.(*envplugin.Client)
		if !ok {
			return fmt.Errorf("%s is not an environment", src)
		}
		info := c.Info()
		if err := config.CheckReserved(info.Config, config.ReservedEnvSettings, info.Name); err != nil {
			return err
		}
		js, d := config.DecodePluginBody(e.Body, info.Config, f.EvalContext, info.Name)
		diags = append(diags, d...)
		if d.HasErrors() {
			return fmt.Errorf("env %q: invalid config", e.Name)
		}
		pd := c.Configure(ctx, schema.Config{Name: e.Name, JSON: js, BaseDir: f.Dir, RunID: runID})
		diags = append(diags, config.PluginDiagnostics(pd, info.Config, info.Name, e.Body, e.AttrRanges, e.DefRange)...)
		if pd.HasErrors() {
			return fmt.Errorf("env %q: rejected by plugin %s", e.Name, info.Name)
		}
		return nil
	}
	in, err := mgr.Start(ctx, src, setup, pluginmgr.StartOptions{PassEnv: e.PassEnv})
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		if !diags.HasErrors() {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Env plugin failed to start", Detail: err.Error(), Subject: e.DefRange.Ptr()})
		}
		return nil, diags
	}
	return in, diags
}

// NewPolicy decodes the run's policy block and builds the policy.
func NewPolicy(f *config.File, opts []policy.Option) (policy.Policy, hcl.Diagnostics) {
	pb := f.Policy()
	if pb == nil {
		return nil, hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "No policy block", Detail: "A run needs a policy block, e.g. policy \"replay\" { provider = \"replay\" file = \"completions.jsonl\" }."}}
	}
	var cfg policy.Config
	diags := gohcl.DecodeBody(pb.Body, f.EvalContext, &cfg)
	if diags.HasErrors() {
		return nil, diags
	}
	cfg.Name = pb.Name
	p, err := policy.New(cfg, f.Dir, opts...)
	if err != nil {
		// Each diagnostic carries the path of the setting that caused it:
		// one of the policy block's, or of the trainer block's (the
		// embedded provider sizes its training from it).
		for _, d := range schema.FromError(err) {
			o := config.Origin{Body: pb.Body, Block: pb.DefRange}
			summary, detail := "Invalid policy", fmt.Sprintf("policy %q: ", pb.Name)
			if len(d.Path) > 0 && d.Path[0] == "trainer" && f.Trainer != nil {
				o = config.Origin{Body: f.Trainer.Body, Block: f.Trainer.DefRange}
				summary, detail = "Invalid trainer setting", ""
				d.Path = d.Path[1:]
			}
			if len(d.Path) > 0 {
				detail += strings.Join(d.Path, ".") + ": "
			}
			if d.Summary != "" {
				detail += d.Summary + ": "
			}
			d.Summary, d.Detail = summary, detail+d.Detail
			diags = append(diags, config.InConfigBody(schema.Diagnostics{d}, o)...)
		}
		return nil, diags
	}
	return p, diags
}
