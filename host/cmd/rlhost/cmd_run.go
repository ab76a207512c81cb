package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/hcl/v2"
	"github.com/spf13/pflag"

	"github.com/rlhost/rlhost/host/config"
	"github.com/rlhost/rlhost/host/dashboard"
	"github.com/rlhost/rlhost/host/eval"
	"github.com/rlhost/rlhost/host/job"
	"github.com/rlhost/rlhost/host/output"
	"github.com/rlhost/rlhost/host/pluginmgr"
	"github.com/rlhost/rlhost/host/preflight"
	"github.com/rlhost/rlhost/host/runner"
	"github.com/rlhost/rlhost/host/training"
)

type commonFlags struct {
	vars     []string
	logLevel string
}

func (c *commonFlags) add(fs *pflag.FlagSet) {
	fs.StringArrayVar(&c.vars, "var", nil, "set a config variable, name=value (repeatable)")
	fs.StringVar(&c.logLevel, "log-level", envOr("RLHOST_LOG", "warn"), "log level for host and plugin logs: trace, debug, info, warn, error")
}

func (c *commonFlags) varMap() (map[string]string, error) {
	m := map[string]string{}
	for _, kv := range c.vars {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--var %q: want name=value", kv)
		}
		m[k] = v
	}
	return m, nil
}

func (a *app) logger(level string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "rlhost", Level: hclog.LevelFromString(level), Output: a.stderr})
}

func (a *app) manager(level string) (*pluginmgr.Manager, error) {
	return pluginmgr.New(pluginmgr.Options{Builtins: builtinNames(), Logger: a.logger(level)})
}

const runUsage = `Usage: rlhost run FILE.hcl [flags]

Runs the job: for each step, samples batch_size tasks from the env, runs
group_size episodes per task (each in its own sandbox), scores them, and writes
OUT/trajectories.jsonl, OUT/metrics.jsonl and OUT/summary.json.

A job with a trainer block also trains: the policy (provider "embedded") is
served by rlhost from the weights being trained, and after each step its
groups become one GRPO update. Such a run also writes OUT/rewards.png,
checkpoints under OUT/checkpoints and the trained model under OUT/final.

Ctrl-C stops cleanly: in-flight episodes end, sandboxes are destroyed, plugins
shut down, finished trajectories stay on disk, and a training run writes a
checkpoint that --resume continues from. A second Ctrl-C forces.

Examples:
  rlhost run examples/quickstart.hcl
  rlhost run examples/quickstart.hcl --resume runs/quickstart
  rlhost run examples/quickstart.hcl --ui     (and open the URL it prints)
  rlhost run examples/coding.hcl --dry-run
  rlhost run examples/coding.hcl --dry-run --var backend=daytona --steps 2
`

func (a *app) cmdRun(ctx context.Context, args []string) int {
	fs := newFlagSet("run", runUsage, a)
	var cf commonFlags
	cf.add(fs)
	dryRun := fs.Bool("dry-run", false, "roll out and score only, even when the job has a trainer block")
	resume := fs.String("resume", "", "continue the training run in DIR from its newest checkpoint (same job file)")
	outDir := fs.String("out", "", "output directory (default: the config's output.dir, else runs/<run name>)")
	steps := fs.Int("steps", 0, "override run.steps")
	overwrite := fs.Bool("overwrite", false, "replace the outputs of an earlier run in the output directory")
	appendOut := fs.Bool("append", false, "append a new run (a new run id, its steps numbered from 0 again) to the outputs in the output directory; --resume continues a training run instead")
	ui := fs.Bool("ui", false, "serve a live dashboard of the run while it runs (see rlhost ui)")
	uiListen := fs.String("ui-listen", dashboard.DefaultAddr, "with --ui: "+listenHelp)
	if done, code := parse(fs, args); done {
		return code
	}
	f, code := a.loadConfig("run", fs, &cf)
	if f == nil {
		return code
	}
	if *steps < 0 {
		a.errorf("--steps must be positive")
		return 2
	}
	if *overwrite && *appendOut {
		a.errorf("--overwrite and --append exclude each other")
		return 2
	}
	var dash *runUI
	if *ui {
		var err error
		if dash, err = a.listenRunUI(*uiListen); err != nil {
			a.errorf("%v", err)
			return 1
		}
		defer dash.close()
	}
	if *steps > 0 {
		f.Run.Steps = *steps
	}
	dir := f.Output.Dir
	if *outDir != "" {
		dir = *outDir
	}
	train, code := a.trainSettings(f, *dryRun, *resume != "")
	if code != 0 {
		return code
	}
	evalSettings, diags := eval.Decode(f)
	printDiags(a.stderr, f, diags)
	if diags.HasErrors() {
		return 1
	}
	var rs resumeState
	if *resume != "" {
		if *overwrite || *appendOut || *outDir != "" {
			a.errorf("--resume continues the run in its own directory; it takes no --out, --overwrite or --append")
			return 2
		}
		dir = *resume
		var err error
		if rs, err = loadResume(dir, f.Run.Steps); err != nil {
			a.errorf("%v", err)
			return 1
		}
		if rs.state.NextStep >= f.Run.Steps {
			fmt.Fprintf(a.stdout, "run %s already did all %d steps; its final model is in %s\n", rs.state.RunID, f.Run.Steps, filepath.Join(dir, training.FinalDir))
			return 0
		}
	}
	mgr, err := a.manager(cf.logLevel)
	if err != nil {
		a.errorf("%v", err)
		return 1
	}
	runID := runner.RunID(f.Run.Name, time.Now())
	if rs.state.RunID != "" {
		runID = rs.state.RunID
	}
	// A second Ctrl-C while we clean up means "now": plugins die with us
	// (parent-death signal), and so do their sandboxes.
	finished := make(chan struct{})
	defer close(finished)
	go func() {
		select {
		case <-ctx.Done():
		case <-finished:
			return
		}
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
		fmt.Fprintln(a.stderr, "\nrlhost: interrupted; ending episodes and removing sandboxes (Ctrl-C again to force)")
		<-ch
		fmt.Fprintln(a.stderr, "rlhost: forced exit")
		os.Exit(130)
	}()

	j, diags := job.Prepare(ctx, f, mgr, job.Options{RunID: runID, SkipPolicy: true})
	var eng *training.Engine
	if !diags.HasErrors() {
		var d hcl.Diagnostics
		eng, d = openPolicy(ctx, f, j, training.PolicyOptions{Train: train, Checkpoint: rs.checkpoint, Logger: a.logger(cf.logLevel),
			OutDir: dir, RunID: runID, ResumeStep: rs.state.NextStep, ResumeVersion: rs.state.Version()})
		diags = append(diags, d...)
	}
	printDiags(a.stderr, f, diags)
	if diags.HasErrors() {
		if j != nil {
			j.Close(ctx)
		}
		mgr.StopAll(context.Background())
		return 1
	}
	defer j.Close(ctx)
	defer mgr.StopAll(context.WithoutCancel(ctx))
	if eng != nil {
		defer eng.Close()
	}
	// The config is whole (every plugin accepted its block): only now is
	// an earlier run in the way worth mentioning. Check now, delete after
	// the pre-flight: --overwrite must not cost the user an earlier run
	// when this one cannot start.
	old, err := existingOutputs(dir, *overwrite, *appendOut || *resume != "", "--out DIR, --overwrite or --append")
	if err != nil {
		a.errorf("%v", err)
		return 1
	}
	if err := preflight.Check(ctx, f, j.Policy, j.Backend, a.stderr); err != nil {
		a.errorf("%v", err)
		return 1
	}
	if err := removeOutputs(dir, old); err != nil {
		a.errorf("%v", err)
		return 1
	}

	out, err := output.Open(dir)
	if err != nil {
		a.errorf("%v", err)
		return 1
	}
	defer out.Close()
	for _, rec := range out.Recovered() {
		fmt.Fprintf(a.stderr, "rlhost: warning: %s\n", rec)
	}
	vars, _ := cf.varMap() // checked by loadConfig
	if err := out.WriteJob(jobRecord(f, runID, vars)); err != nil {
		a.errorf("%v", err)
		return 1
	}
	if err := dash.serve(ctx, dir); err != nil {
		a.errorf("%v", err)
		return 1
	}
	envBlock := f.Env()
	fmt.Fprintf(a.stdout, "run %s: env %s (%s), %s, policy %s; %d steps x %d tasks x %d episodes -> %s\n",
		runID, envBlock.Name, j.Env.Info().Name, j.SandboxLabel(), f.Run.Policy,
		f.Run.Steps, f.Run.BatchSize, f.Run.GroupSize, dir)
	prog := output.NewProgress(a.stdout, f.Run.Steps, f.Run.BatchSize*f.Run.GroupSize, f.Run.Concurrency)
	out.OnTrajectory(prog.Trajectory)
	r := j.Runner(out)
	r.Progress, r.Logger, r.Observe = prog, a.logger(cf.logLevel), prog
	if l, ok := j.Policy.(interface{ SetLogger(hclog.Logger) }); ok {
		// A fleet says when a server goes out or comes back.
		l.SetLogger(r.Logger)
	}
	dash.watch(r, out, prog)
	for _, rec := range out.Recovered() {
		r.Recovered = append(r.Recovered, rec.String())
	}
	r.Settings.StartStep, r.Earlier = rs.state.NextStep, rs.summary
	r.Resumed = rs.ahead
	if train != nil {
		r.Settings.MaxOffPolicySteps = train.MaxOffPolicySteps
	}
	var sink *training.Sink
	if train != nil {
		fmt.Fprintf(a.stdout, "training %s: %d parameters, GRPO loss %s, lr %g; device %s\n", f.Run.Policy,
			eng.Model.Cfg.NumParams(), train.GRPO.LossType, train.GRPO.LR, eng.Device)
		if rs.checkpoint != "" {
			fmt.Fprintf(a.stdout, "resuming from %s: steps 0 to %d done, continuing at step %d\n", rs.checkpoint, rs.state.NextStep-1, rs.state.NextStep)
		} else if train.Warmup != nil {
			if err := a.warmup(ctx, eng, train, f.Run.Seed, dir); err != nil {
				a.errorf("%v", err)
				if ctx.Err() != nil {
					return 130
				}
				return 1
			}
			if eng.Sync != nil {
				// The warm-up trained the adapter: the server must sample
				// it from the first step on.
				if _, err := eng.Sync.Push(ctx, 0, eng.Version()); err != nil {
					a.errorf("after the warm-up: %v", err)
					return 1
				}
			}
		}
		sink = training.NewSink(eng, train, runID, dir, rs.state.NextStep, rs.earlier)
		sink.Title, sink.Logger = f.Run.Name, r.Logger
		r.Sinks = append(r.Sinks, sink)
	}
	if code := a.holdOut(ctx, r, evalSettings, train != nil); code != 0 {
		return code
	}
	res, err := r.Run(ctx)
	dash.ended()
	res.Summary.OutputDir = dir
	if sink != nil {
		completed := err == nil && !res.Interrupted && ctx.Err() == nil
		if ferr := sink.Finish(completed); ferr != nil {
			a.errorf("%v", ferr)
			if err == nil {
				err = ferr
			}
		} else if completed {
			fmt.Fprintf(prog, "final model: %s\n", filepath.Join(dir, training.FinalDir))
		} else {
			fmt.Fprintf(a.stderr, "rlhost: checkpoint saved; continue with: rlhost run %s --resume %s\n", f.Path, dir)
		}
	}
	fmt.Fprint(prog, output.FinalSummary(res.Summary))
	if res.Interrupted || ctx.Err() != nil {
		if err != nil {
			a.errorf("%v", err)
		}
		fmt.Fprintf(a.stderr, "rlhost: run interrupted; finished trajectories are in %s\n", dir)
		return 130
	}
	if err != nil {
		a.errorf("%v", err)
		return 1
	}
	if s := res.Summary; s.Episodes > 0 && s.Errors == s.Episodes {
		a.errorf("every episode failed (%d of %d); the first error was: %s\nSee the error field of %s.", s.Errors, s.Episodes, res.FirstError, filepath.Join(dir, output.TrajectoriesFile))
		return 1
	}
	return 0
}

// existingOutputs refuses to mix two runs' outputs unless asked to, naming
// the command's choices, and returns the files --overwrite will remove
// once the job has started.
// (--append keeps the old lines; step numbers start at 0 again, and each
// line's run_id tells the runs apart.)
func existingOutputs(dir string, overwrite, appendOut bool, choices string) ([]string, error) {
	if overwrite && appendOut {
		return nil, fmt.Errorf("--overwrite and --append exclude each other")
	}
	// A training run's model outputs belong to the run as much as its
	// lines: left behind, an old checkpoint would outrank the new run's on
	// --resume, and an old final/ would pass for this run's model.
	files := []string{output.TrajectoriesFile, output.MetricsFile, output.SummaryFile, output.JobFile, training.RewardsPlot,
		training.CheckpointsDir, training.FinalDir, training.AdapterDir, training.BaseDir, training.AdaptersDir, training.WarmupDir}
	var existing []string
	for _, name := range files {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			existing = append(existing, name)
		}
	}
	if len(existing) == 0 || appendOut {
		return nil, nil
	}
	if !overwrite {
		return nil, fmt.Errorf("output directory %s already holds a run (%s); pass %s", dir, strings.Join(existing, ", "), choices)
	}
	return existing, nil
}

func removeOutputs(dir string, names []string) error {
	for _, name := range names {
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("remove old output: %w", err)
		}
	}
	return nil
}

// loadConfig reads the one config file a command takes, printing
// diagnostics; it returns nil and the exit code on failure.
func (a *app) loadConfig(cmd string, fs *pflag.FlagSet, cf *commonFlags) (*config.File, int) {
	if fs.NArg() != 1 {
		a.errorf("%s takes exactly one config file (got %d arguments); see rlhost %s --help", cmd, fs.NArg(), cmd)
		return nil, 2
	}
	vars, err := cf.varMap()
	if err != nil {
		a.errorf("%v", err)
		return nil, 2
	}
	f, diags := config.Load(fs.Arg(0), vars)
	printDiags(a.stderr, f, diags)
	if diags.HasErrors() {
		return nil, 1
	}
	return f, 0
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
