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

	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/core/sdk/envplugin"
	"github.com/rlhost/rlhost/core/sdk/pluginbase"
	"github.com/rlhost/rlhost/core/sdk/sandboxplugin"
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
	RunID string
	// SkipPolicy leaves Job.Policy for the caller to build: a run that
	// trains opens its policy with the trainer (training.OpenPolicy).
	SkipPolicy bool
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
		p, d := NewPolicy(f)
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
	s := runner.Settings{
		Steps: r.Steps, BatchSize: r.BatchSize, GroupSize: r.GroupSize, Seed: r.Seed,
		Concurrency: r.Concurrency, MaxTurns: r.MaxTurns, EpisodeTimeout: r.EpisodeTimeout,
	}
	if r.MaxOffPolicySteps != nil {
		// A run that trains resolves the provider's default instead
		// (training.Settings.MaxOffPolicySteps); one that does not runs
		// its steps one after another unless told otherwise.
		s.MaxOffPolicySteps = *r.MaxOffPolicySteps
	}
	return s
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
	return start(ctx, f, mgr, runID, pluginBlock{
		kind: pluginbase.KindSandbox, noun: "sandbox backend", article: "a", ref: sb.PluginRef(),
		block: "sandbox", name: sb.Name, body: sb.Body, attrs: sb.AttrRanges, def: sb.DefRange,
		refAttrs: []string{"plugin", "backend"}, reserved: config.ReservedSandboxSettings,
		client: func(raw any) (describer, bool) { c, ok := raw.(*sandboxplugin.Client); return c, ok },
		configure: func(ctx context.Context, raw any, cfg schema.Config) schema.Diagnostics {
			return raw.(*sandboxplugin.Client).Configure(ctx, cfg, sb.Spec)
		},
	})
}

// StartEnv starts and configures the plugin of env block e.
func StartEnv(ctx context.Context, f *config.File, e *config.Env, mgr *pluginmgr.Manager, runID string) (*pluginmgr.Instance, hcl.Diagnostics) {
	return start(ctx, f, mgr, runID, pluginBlock{
		kind: pluginbase.KindEnv, noun: "env plugin", article: "an", ref: e.Plugin,
		block: "env", name: e.Name, body: e.Body, attrs: e.AttrRanges, def: e.DefRange,
		refAttrs: []string{"plugin"}, reserved: config.ReservedEnvSettings, passEnv: e.PassEnv,
		client: func(raw any) (describer, bool) { c, ok := raw.(*envplugin.Client); return c, ok },
		configure: func(ctx context.Context, raw any, cfg schema.Config) schema.Diagnostics {
			return raw.(*envplugin.Client).Configure(ctx, cfg)
		},
	})
}

// pluginBlock is what start needs to know of a sandbox or env block.
type pluginBlock struct {
	kind     string // pluginbase.KindSandbox or KindEnv
	noun     string // "sandbox backend", for messages
	article  string // "a" or "an", before noun
	ref      string // what to resolve: a built-in name or a path
	block    string // "sandbox" or "env"
	name     string // the block's label
	body     hcl.Body
	attrs    map[string]hcl.Range
	def      hcl.Range
	refAttrs []string // the attributes that named the plugin, blamed when it cannot be found
	reserved []string
	passEnv  []string
	// client reports whether raw is this kind's client; configure calls its
	// Configure (raw has passed client).
	client    func(raw any) (describer, bool)
	configure func(ctx context.Context, raw any, cfg schema.Config) schema.Diagnostics
}

// chosenAt is the attribute that named the plugin (backend = "daytona"),
// else the block's first line.
func (b pluginBlock) chosenAt() hcl.Range {
	for _, a := range b.refAttrs {
		if r, ok := b.attrs[a]; ok {
			return r
		}
	}
	return b.def
}

// describer is what every kind's client offers: the plugin's Describe.
type describer interface{ Info() pluginbase.Info }

// start resolves, launches and configures a plugin: decode the block
// against the schema the plugin declares, then hand it the result. The
// setup runs again after every restart of the plugin.
func start(ctx context.Context, f *config.File, mgr *pluginmgr.Manager, runID string, b pluginBlock) (*pluginmgr.Instance, hcl.Diagnostics) {
	src, err := mgr.Resolve(b.kind, b.ref, f.Dir)
	if err != nil {
		return nil, hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Cannot find " + b.noun, Detail: err.Error(), Subject: b.chosenAt().Ptr()}}
	}
	var diags hcl.Diagnostics
	var mu sync.Mutex // setup runs again, on another goroutine, after each restart
	setup := func(ctx context.Context, raw any) error {
		mu.Lock()
		defer mu.Unlock()
		c, ok := b.client(raw)
		if !ok {
			return fmt.Errorf("%s is not %s %s", src, b.article, b.noun)
		}
		info := c.Info()
		if err := config.CheckReserved(info.Config, b.reserved, info.Name); err != nil {
			return err
		}
		js, d := config.DecodePluginBody(b.body, info.Config, f.EvalContext, info.Name)
		diags = append(diags, d...)
		if d.HasErrors() {
			return fmt.Errorf("%s %q: invalid config", b.block, b.name)
		}
		pd := b.configure(ctx, raw, schema.Config{Name: b.name, JSON: js, BaseDir: f.Dir, RunID: runID})
		// What the plugin says of a setting the block leaves out (a
		// required key) is placed on the line that chose the plugin.
		diags = append(diags, config.PluginDiagnostics(pd, info.Config, info.Name, b.body, b.attrs, b.chosenAt())...)
		if pd.HasErrors() {
			return fmt.Errorf("%s %q: rejected by plugin %s", b.block, b.name, info.Name)
		}
		return nil
	}
	in, err := mgr.Start(ctx, src, setup, pluginmgr.StartOptions{PassEnv: b.passEnv})
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		if !diags.HasErrors() {
			noun := strings.ToUpper(b.noun[:1]) + b.noun[1:]
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: noun + " failed to start", Detail: err.Error(), Subject: b.chosenAt().Ptr()})
		}
		return nil, diags
	}
	return in, diags
}

// PolicyConfig decodes the run's policy block.
func PolicyConfig(f *config.File) (policy.Config, hcl.Diagnostics) {
	pb := f.Policy()
	if pb == nil {
		return policy.Config{}, hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "No policy block", Detail: "A run needs a policy block, e.g. policy \"replay\" { provider = \"replay\" file = \"completions.jsonl\" }."}}
	}
	var cfg policy.Config
	diags := gohcl.DecodeBody(pb.Body, f.EvalContext, &cfg)
	cfg.Name = pb.Name
	return cfg, diags
}

// NewPolicy builds the run's policy from its policy block, with any
// provider but the ones a trainer opens (training.OpenPolicy).
func NewPolicy(f *config.File) (policy.Policy, hcl.Diagnostics) {
	cfg, diags := PolicyConfig(f)
	if diags.HasErrors() {
		return nil, diags
	}
	p, err := policy.New(cfg, f.Dir)
	if err != nil {
		return nil, append(diags, PolicyDiagnostics(f, err)...)
	}
	return p, diags
}

// PolicyDiagnostics places an error building the run's policy: each
// diagnostic inside it carries the path of the setting that caused it,
// one of the policy block's, or of the trainer block's (path "trainer",
// when the trainer sized the policy's engine).
func PolicyDiagnostics(f *config.File, err error) hcl.Diagnostics {
	pb := f.Policy()
	var diags hcl.Diagnostics
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
	return diags
}
