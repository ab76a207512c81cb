package main

import (
	"context"
	"fmt"

	"github.com/rlhost/rlhost/host/job"
	"github.com/rlhost/rlhost/host/preflight"
)

const validateUsage = `Usage: rlhost validate FILE.hcl [flags]

Checks a job file the way a run would, without running anything: HCL syntax,
types, references between blocks, and each plugin's own settings (the env and
sandbox plugins are started, shown their blocks, and stopped again). Problems
are printed with file:line:col and the offending source line.

With --check-services it also makes the pre-flight checks a run makes: the
policy's server must answer GET /models and serve the model, and the sandbox
backend must answer one authenticated call.
`

func (a *app) cmdValidate(ctx context.Context, args []string) int {
	fs := newFlagSet("validate", validateUsage, a)
	var cf commonFlags
	cf.add(fs)
	checkServices := fs.Bool("check-services", false, "also check that the policy server and the sandbox backend answer")
	if done, code := parse(fs, args); done {
		return code
	}
	f, code := a.loadConfig("validate", fs, &cf)
	if f == nil {
		return code
	}
	mgr, err := a.manager(cf.logLevel)
	if err != nil {
		a.errorf("%v", err)
		return 1
	}
	defer mgr.StopAll(context.WithoutCancel(ctx))
	j, diags := job.Prepare(ctx, f, mgr, job.Options{RunID: "validate"})
	printDiags(a.stderr, f, diags)
	if diags.HasErrors() {
		return 1
	}
	defer j.Close(ctx)
	services := "not checked (--check-services checks them)"
	if *checkServices {
		if err := preflight.Check(ctx, f, j.Policy, j.Backend, a.stderr); err != nil {
			a.errorf("%v", err)
			return 1
		}
		services = "the policy server and the sandbox backend answered"
	}
	env := f.Env()
	sb := f.Sandbox(env.Sandbox)
	fmt.Fprintf(a.stdout, "%s is valid.\n  run      %s: %d steps x %d tasks x %d episodes, concurrency %d, max_turns %d\n  env      %s (plugin %s %s)\n  sandbox  %s (backend %s %s)\n  policy   %s\n  output   %s\n  services %s\n",
		f.Path, f.Run.Name, f.Run.Steps, f.Run.BatchSize, f.Run.GroupSize, f.Run.Concurrency, f.Run.MaxTurns,
		env.Name, j.Env.Info().Name, j.Env.Info().Version, sb.Name, j.Backend.Info().Name, j.Backend.Info().Version,
		f.Run.Policy, f.Output.Dir, services)
	return 0
}
