package main

import (
	"context"
	"fmt"

	"github.com/hashicorp/hcl/v2"

	"github.com/rlhost/rlhost/host/config"
	"github.com/rlhost/rlhost/host/eval"
	"github.com/rlhost/rlhost/host/job"
	"github.com/rlhost/rlhost/host/preflight"
	trainingpkg "github.com/rlhost/rlhost/host/training"
)

const validateUsage = `Usage: rlhost validate FILE.hcl [flags]

Checks a job file the way a run would, without running anything: HCL syntax,
types, references between blocks, and each plugin's own settings (the env and
sandbox plugins are started, shown their blocks, and stopped again). Problems
are printed with file:line:col and the offending source line.

With --check-services it also makes the pre-flight checks a run makes: the
policy's server must answer GET /models and serve the model, and the sandbox
backend must answer one authenticated call.

With --dry-run it checks the job as rlhost run --dry-run runs it: rollouts
and scoring only, so the trainer block is not checked and any policy goes.
`

func (a *app) cmdValidate(ctx context.Context, args []string) int {
	fs := newFlagSet("validate", validateUsage, a)
	var cf commonFlags
	cf.add(fs)
	checkServices := fs.Bool("check-services", false, "also check that the policy server and the sandbox backend answer")
	dryRun := fs.Bool("dry-run", false, "check the job as rlhost run --dry-run runs it (rollouts and scoring only, no trainer block)")
	if done, code := parse(fs, args); done {
		return code
	}
	f, code := a.loadConfig("validate", fs, &cf)
	if f == nil {
		return code
	}
	training := "none (rollouts and scoring only)"
	var train *trainingpkg.Settings
	if f.Trainer != nil && !*dryRun {
		s, code := a.trainSettings(f, false, false)
		if code != 0 {
			return code
		}
		train = s
		training = "GRPO on the embedded policy (see docs/training.md)"
		if s.Sync != nil {
			training = "GRPO on a LoRA adapter, hot-loaded into the vLLM server every step (see docs/vllm.md)"
		}
	}
	evalSettings, diags := eval.Decode(f)
	printDiags(a.stderr, f, diags)
	if diags.HasErrors() {
		return 1
	}
	mgr, err := a.manager(cf.logLevel)
	if err != nil {
		a.errorf("%v", err)
		return 1
	}
	defer mgr.StopAll(context.WithoutCancel(ctx))
	j, diags := job.Prepare(ctx, f, mgr, job.Options{RunID: "validate", SkipPolicy: true})
	if !diags.HasErrors() {
		diags = append(diags, checkPolicy(f, j, train)...)
	}
	printDiags(a.stderr, f, diags)
	if diags.HasErrors() {
		if j != nil {
			j.Close(ctx)
		}
		return 1
	}
	defer j.Close(ctx)
	if evalSettings.HoldsOut() {
		// Held-out ids must name the env's tasks.
		if _, err := eval.HeldOut(ctx, j.Env.LiveEnv(), evalSettings); err != nil {
			a.errorf("%v", err)
			return 1
		}
	}
	services := "not checked (--check-services checks them)"
	if *checkServices {
		if err := preflight.Check(ctx, f, j.Policy, j.Backend, a.stderr); err != nil {
			a.errorf("%v", err)
			return 1
		}
		services = "the policy server and the sandbox backend answered"
		if pb := f.Policy(); pb != nil && pb.Provider == trainingpkg.ProviderName {
			services = "the sandbox backend answered; the embedded policy's server starts with the run"
		}
	}
	env := f.Env()
	sandbox := "none (the env runs no commands)"
	if j.Backend != nil {
		sb := f.Sandbox(env.Sandbox)
		sandbox = fmt.Sprintf("%s (backend %s %s)", sb.Name, j.Backend.Info().Name, j.Backend.Info().Version)
	}
	fmt.Fprintf(a.stdout, "%s is valid.\n  run      %s: %d steps x %d tasks x %d episodes, concurrency %d, max_turns %d\n  env      %s (plugin %s %s)\n  sandbox  %s\n  policy   %s\n  training %s\n  output   %s\n  services %s\n",
		f.Path, f.Run.Name, f.Run.Steps, f.Run.BatchSize, f.Run.GroupSize, f.Run.Concurrency, f.Run.MaxTurns,
		env.Name, j.Env.Info().Name, j.Env.Info().Version, sandbox,
		f.Run.Policy, training, f.Output.Dir, services)
	return 0
}

// checkPolicy builds the policy validate checks into j: the trainer's is
// checked, not opened (the embedded policy's model is looked for, not
// loaded, and the trainer block is checked against its shape).
func checkPolicy(f *config.File, j *job.Job, train *trainingpkg.Settings) hcl.Diagnostics {
	cfg, diags := job.PolicyConfig(f)
	if diags.HasErrors() {
		return diags
	}
	if !trainingpkg.Opens(cfg.Provider, train) {
		p, d := job.NewPolicy(f)
		j.Policy = p
		return d
	}
	p, err := trainingpkg.CheckPolicy(cfg, f.Dir, train)
	if err != nil {
		return job.PolicyDiagnostics(f, err)
	}
	j.Policy = p
	return nil
}
