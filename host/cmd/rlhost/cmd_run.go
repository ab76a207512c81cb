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
	// 1. The flags and the job file, checked before anything starts.
	o, code := a.parseRun(args)
	if o == nil {
		return code
	}
	defer o.dash.close()
	// 2. What --resume continues, if anything.
	rs, done, code := a.resumeRun(o)
	if done {
		return code
	}
	defer a.forceOnSecondInterrupt(ctx)()
	// 3. The plugins, the policy (and the engine of a run that trains),
	// the pre-flight and the output directory.
	p, code := a.prepareRun(ctx, o, rs)
	if p == nil {
		return code
	}
	defer p.close(ctx)
	// 4. The runner and its sinks; a fresh training run's warm-up.
	sink, code := a.setUpRunner(ctx, o, rs, p)
	if code != 0 {
		return code
	}
	// 5. The steps, then what the run leaves: the final model or a
	// checkpoint, the summary, the exit code.
	res, err := p.runner.Run(ctx)
	o.dash.ended()
	return a.finishRun(ctx, o, p, sink, res, err)
}

// runOptions are rlhost run's flags and job file, checked.
type runOptions struct {
	cf                           commonFlags
	f                            *config.File
	dryRun, overwrite, appendOut bool
	resume, outDir, dir          string // dir: where the outputs go
	train                        *training.Settings
	eval                         *eval.Settings
	dash                         *runUI // nil without --ui
}

// parseRun reads the flags and the job file and checks them; nil and the
// exit code when they are wrong.
func (a *app) parseRun(args []string) (*runOptions, int) {
	o := &runOptions{}
	fs := newFlagSet("run", runUsage, a)
	o.cf.add(fs)
	fs.BoolVar(&o.dryRun, "dry-run", false, "roll out and score only, even when the job has a trainer block")
	fs.StringVar(&o.resume, "resume", "", "continue the training run in DIR from its newest checkpoint (same job file)")
	fs.StringVar(&o.outDir, "out", "", "output directory (default: the config's output.dir, else runs/<run name>)")
	steps := fs.Int("steps", 0, "override run.steps")
	fs.BoolVar(&o.overwrite, "overwrite", false, "replace the outputs of an earlier run in the output directory")
	fs.BoolVar(&o.appendOut, "append", false, "append a new run (a new run id, its steps numbered from 0 again) to the outputs in the output directory; --resume continues a training run instead")
	ui := fs.Bool("ui", false, "serve a live dashboard of the run while it runs (see rlhost ui)")
	uiListen := fs.String("ui-listen", dashboard.DefaultAddr, "with --ui: "+listenHelp)
	if done, code := parse(fs, args); done {
		return nil, code
	}
	f, code := a.loadConfig("run", fs, &o.cf)
	if f == nil {
		return nil, code
	}
	o.f = f
	if *steps < 0 {
		a.errorf("--steps must be positive")
		return nil, 2
	}
	if o.overwrite && o.appendOut {
		a.errorf("--overwrite and --append exclude each other")
		return nil, 2
	}
	if *ui {
		// The port first: a taken one stops the run before anything starts.
		var err error
		if o.dash, err = a.listenRunUI(*uiListen); err != nil {
			a.errorf("%v", err)
			return nil, 1
		}
	}
	if *steps > 0 {
		f.Run.Steps = *steps
	}
	o.dir = f.Output.Dir
	if o.outDir != "" {
		o.dir = o.outDir
	}
	if o.train, code = a.trainSettings(f, o.dryRun, o.resume != ""); code != 0 {
		o.dash.close()
		return nil, code
	}
	var diags hcl.Diagnostics
	o.eval, diags = eval.Decode(f)
	printDiags(a.stderr, f, diags)
	if diags.HasErrors() {
		o.dash.close()
		return nil, 1
	}
	return o, 0
}

// resumeRun loads what --resume continues (a zero resumeState for a fresh
// run). done is set when the command ends here, with code.
func (a *app) resumeRun(o *runOptions) (rs resumeState, done bool, code int) {
	if o.resume == "" {
		return rs, false, 0
	}
	if o.overwrite || o.appendOut || o.outDir != "" {
		a.errorf("--resume continues the run in its own directory; it takes no --out, --overwrite or --append")
		return rs, true, 2
	}
	o.dir = o.resume
	var err error
	if rs, err = loadResume(o.dir, o.f.Run.Steps); err != nil {
		a.errorf("%v", err)
		return rs, true, 1
	}
	if rs.state.NextStep >= o.f.Run.Steps {
		fmt.Fprintf(a.stdout, "run %s already did all %d steps; its final model is in %s\n", rs.state.RunID, o.f.Run.Steps, filepath.Join(o.dir, training.FinalDir))
		return rs, true, 0
	}
	return rs, false, 0
}

// forceOnSecondInterrupt makes a second Ctrl-C, while the first one's
// clean-up runs, exit at once: plugins die with rlhost (parent-death
// signal), and so do their sandboxes. The returned function stops
// watching.
func (a *app) forceOnSecondInterrupt(ctx context.Context) func() {
	finished := make(chan struct{})
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
	return func() { close(finished) }
}

// preparedRun is a run with its plugins started, its policy built and its
// outputs open.
type preparedRun struct {
	runID  string
	mgr    *pluginmgr.Manager
	job    *job.Job
	eng    *training.Engine // nil unless rlhost serves or trains the policy
	out    *output.Writer
	prog   *output.Progress
	runner *runner.Runner
}

func (p *preparedRun) close(ctx context.Context) {
	if p.out != nil {
		p.out.Close()
	}
	if p.eng != nil {
		p.eng.Close()
	}
	p.mgr.StopAll(context.WithoutCancel(ctx))
	p.job.Close(ctx)
}

// prepareRun starts the plugins and builds the policy, then, once the
// whole config is accepted, checks the services and opens the output
// directory. nil and the exit code on failure, with everything it started
// stopped.
func (a *app) prepareRun(ctx context.Context, o *runOptions, rs resumeState) (*preparedRun, int) {
	mgr, err := a.manager(o.cf.logLevel)
	if err != nil {
		a.errorf("%v", err)
		return nil, 1
	}
	p := &preparedRun{runID: runner.RunID(o.f.Run.Name, time.Now()), mgr: mgr}
	if rs.state.RunID != "" {
		p.runID = rs.state.RunID
	}
	j, diags := job.Prepare(ctx, o.f, mgr, job.Options{RunID: p.runID, SkipPolicy: true})
	if !diags.HasErrors() {
		var d hcl.Diagnostics
		p.eng, d = openPolicy(ctx, o.f, j, training.PolicyOptions{Train: o.train, Checkpoint: rs.checkpoint, Logger: a.logger(o.cf.logLevel),
			OutDir: o.dir, RunID: p.runID, ResumeStep: rs.state.NextStep, ResumeVersion: rs.state.Version()})
		diags = append(diags, d...)
	}
	printDiags(a.stderr, o.f, diags)
	if diags.HasErrors() {
		if j != nil {
			j.Close(ctx)
		}
		mgr.StopAll(context.Background())
		return nil, 1
	}
	p.job = j
	fail := func(err error) (*preparedRun, int) {
		a.errorf("%v", err)
		p.close(ctx)
		return nil, 1
	}
	// The config is whole (every plugin accepted its block): only now is
	// an earlier run in the way worth mentioning. Check now, delete after
	// the pre-flight: --overwrite must not cost the user an earlier run
	// when this one cannot start.
	old, err := existingOutputs(o.dir, o.overwrite, o.appendOut || o.resume != "", "--out DIR, --overwrite or --append")
	if err != nil {
		return fail(err)
	}
	if err := preflight.Check(ctx, o.f, j.Policy, j.Backend, a.stderr); err != nil {
		return fail(err)
	}
	if err := removeOutputs(o.dir, old); err != nil {
		return fail(err)
	}
	if p.out, err = output.Open(o.dir); err != nil {
		return fail(err)
	}
	for _, rec := range p.out.Recovered() {
		fmt.Fprintf(a.stderr, "rlhost: warning: %s\n", rec)
	}
	vars, _ := o.cf.varMap() // checked by loadConfig
	if err := p.out.WriteJob(jobRecord(o.f, p.runID, vars)); err != nil {
		return fail(err)
	}
	if err := o.dash.serve(ctx, o.dir); err != nil {
		return fail(err)
	}
	return p, 0
}

// setUpRunner builds the runner, the progress line and the sinks (the
// trainer's, then evaluation's), and runs a fresh training run's warm-up.
// It returns the trainer's sink (nil for a run that does not train) and a
// non-zero exit code on failure.
func (a *app) setUpRunner(ctx context.Context, o *runOptions, rs resumeState, p *preparedRun) (*training.Sink, int) {
	f, train, eng := o.f, o.train, p.eng
	envBlock := f.Env()
	fmt.Fprintf(a.stdout, "run %s: env %s (%s), %s, policy %s; %d steps x %d tasks x %d episodes -> %s\n",
		p.runID, envBlock.Name, p.job.Env.Info().Name, p.job.SandboxLabel(), f.Run.Policy,
		f.Run.Steps, f.Run.BatchSize, f.Run.GroupSize, o.dir)
	p.prog = output.NewProgress(a.stdout, f.Run.Steps, f.Run.BatchSize*f.Run.GroupSize, f.Run.Concurrency)
	p.out.OnTrajectory(p.prog.Trajectory)
	r := p.job.Runner(p.out)
	p.runner = r
	r.Progress, r.Logger, r.Observe = p.prog, a.logger(o.cf.logLevel), p.prog
	if l, ok := p.job.Policy.(interface{ SetLogger(hclog.Logger) }); ok {
		// A fleet says when a server goes out or comes back.
		l.SetLogger(r.Logger)
	}
	o.dash.watch(r, p.out, p.prog)
	for _, rec := range p.out.Recovered() {
		r.Recovered = append(r.Recovered, rec.String())
	}
	r.Settings.StartStep, r.Earlier, r.Resumed = rs.state.NextStep, rs.summary, rs.ahead
	var sink *training.Sink
	if train != nil {
		r.Settings.MaxOffPolicySteps = train.MaxOffPolicySteps
		fmt.Fprintf(a.stdout, "training %s: %d parameters, GRPO loss %s, lr %g; device %s\n", f.Run.Policy,
			eng.Model.Cfg.NumParams(), train.GRPO.LossType, train.GRPO.LR, eng.Device)
		if rs.checkpoint != "" {
			fmt.Fprintf(a.stdout, "resuming from %s: steps 0 to %d done, continuing at step %d\n", rs.checkpoint, rs.state.NextStep-1, rs.state.NextStep)
		} else if train.Warmup != nil {
			if err := a.warmup(ctx, eng, train, f.Run.Seed, o.dir); err != nil {
				a.errorf("%v", err)
				if ctx.Err() != nil {
					return nil, 130
				}
				return nil, 1
			}
			if eng.Sync != nil {
				// The warm-up trained the adapter: the server must sample
				// it from the first step on.
				if _, err := eng.Sync.Push(ctx, 0, eng.Version()); err != nil {
					a.errorf("after the warm-up: %v", err)
					return nil, 1
				}
			}
		}
		sink = training.NewSink(eng, train, p.runID, o.dir, rs.state.NextStep, rs.earlier)
		sink.Title, sink.Logger = f.Run.Name, r.Logger
		r.Sinks = append(r.Sinks, sink)
	}
	return sink, a.holdOut(ctx, r, o.eval, train != nil)
}

// finishRun saves what a training run reached (the final model, or a
// checkpoint to resume from), prints the summary and says how the run
// ended in the exit code.
func (a *app) finishRun(ctx context.Context, o *runOptions, p *preparedRun, sink *training.Sink, res runner.Result, err error) int {
	dir := o.dir
	res.Summary.OutputDir = dir
	if sink != nil {
		completed := err == nil && !res.Interrupted && ctx.Err() == nil
		if ferr := sink.Finish(completed); ferr != nil {
			a.errorf("%v", ferr)
			if err == nil {
				err = ferr
			}
		} else if completed {
			fmt.Fprintf(p.prog, "final model: %s\n", filepath.Join(dir, training.FinalDir))
		} else {
			fmt.Fprintf(a.stderr, "rlhost: checkpoint saved; continue with: rlhost run %s --resume %s\n", o.f.Path, dir)
		}
	}
	fmt.Fprint(p.prog, output.FinalSummary(res.Summary))
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
