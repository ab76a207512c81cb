package main

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/host/config"
	"github.com/rlhost/rlhost/host/dashboard"
	"github.com/rlhost/rlhost/host/output"
	"github.com/rlhost/rlhost/host/runner"
)

const uiUsage = `Usage: rlhost ui [RUN_DIR ...] [flags]

Serves a dashboard of runs in the browser: curves of every per-step figure
in metrics.jsonl (several runs overlaid), each run's health and settings,
and a rollout viewer that pages through the episodes and finds text in
them. It reads the directories rlhost run writes and never changes them;
runs still being written update on the page as they go. Open the URL it
prints; Ctrl-C stops it.

RUN_DIR is a run's output directory, or a directory of them (runs/), whose
runs appear on the page as they start; with none given, ./runs.

Examples:
  rlhost ui runs/quickstart
  rlhost ui runs
  rlhost ui runs/a runs/b --listen 127.0.0.1:8000
`

const listenHelp = "address to serve on, HOST:PORT; an address other machines can reach lets them read the runs (there is no login)"

func (a *app) cmdUI(ctx context.Context, args []string) int {
	fs := newFlagSet("ui", uiUsage, a)
	listen := fs.String("listen", dashboard.DefaultAddr, listenHelp)
	if done, code := parse(fs, args); done {
		return code
	}
	ln, anyHost, err := a.listenUI(*listen)
	if err != nil {
		a.errorf("%v", err)
		return 1
	}
	dirs, parents, err := dashboard.FindRunDirs(fs.Args())
	if err != nil {
		ln.Close()
		a.errorf("%v", err)
		return 1
	}
	if len(dirs) == 0 {
		fmt.Fprintf(a.stderr, "rlhost: note: %s holds no run yet; runs written there will appear\n", strings.Join(parents, ", "))
	}
	srv, err := dashboard.New(dashboard.Options{Dirs: dirs, Parents: parents, AnyHost: anyHost})
	if err != nil {
		ln.Close()
		a.errorf("%v", err)
		return 1
	}
	defer srv.Close()
	fmt.Fprintf(a.stdout, "dashboard of %s at %s (Ctrl-C to stop)\n", plural(len(dirs), "run directory", "run directories"), dashboard.URL(ln))
	if err := srv.Serve(ctx, ln); err != nil {
		a.errorf("%v", err)
		return 1
	}
	return 0
}

// listenUI opens the dashboard's address, warning when it is not
// loopback; such an address must answer to any Host name.
func (a *app) listenUI(addr string) (net.Listener, bool, error) {
	ln, loopback, err := dashboard.Listen(addr)
	if err != nil {
		return nil, false, err
	}
	if !loopback {
		fmt.Fprintf(a.stderr, "rlhost: warning: %s is not a loopback address: anyone who can reach it can read these runs, trajectories included (there is no login)\n", addr)
	}
	return ln, !loopback, nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// runUI is the dashboard rlhost run --ui serves for the run in progress;
// its methods do nothing on nil (no --ui).
type runUI struct {
	a       *app
	ln      net.Listener
	anyHost bool
	live    *dashboard.Live
	dir     string
	srv     *dashboard.Server // nil until serve
	cancel  context.CancelFunc
	done    chan struct{}
}

// listenRunUI opens the dashboard's address before the run starts, so a
// taken port stops the run before it has cost anything.
func (a *app) listenRunUI(addr string) (*runUI, error) {
	ln, anyHost, err := a.listenUI(addr)
	if err != nil {
		return nil, fmt.Errorf("--ui: %w", err)
	}
	return &runUI{a: a, ln: ln, anyHost: anyHost, live: &dashboard.Live{}}, nil
}

// serve serves the run directory dir while the run goes on.
func (u *runUI) serve(ctx context.Context, dir string) error {
	if u == nil {
		return nil
	}
	srv, err := dashboard.New(dashboard.Options{Dirs: []string{dir}, Live: u.live, AnyHost: u.anyHost})
	if err != nil {
		return fmt.Errorf("--ui: %w", err)
	}
	// The dashboard outlives a Ctrl-C until the run has cleaned up.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	u.dir, u.srv, u.cancel, u.done = dir, srv, cancel, make(chan struct{})
	go func() {
		defer close(u.done)
		if err := srv.Serve(sctx, u.ln); err != nil {
			u.a.errorf("%v", err)
		}
	}()
	fmt.Fprintf(u.a.stdout, "dashboard: %s\n", dashboard.URL(u.ln))
	return nil
}

// watch has the runner and the writer report episodes to the dashboard
// as well as to the progress line.
func (u *runUI) watch(r *runner.Runner, out *output.Writer, prog *output.Progress) {
	if u == nil {
		return
	}
	r.Observe = observers{prog, u.live}
	out.OnTrajectory(func(t core.Trajectory) {
		prog.Trajectory(t)
		u.live.EpisodeFinished(t)
	})
}

// ended tells the page that nothing runs any more.
func (u *runUI) ended() {
	if u != nil {
		u.live.End()
	}
}

// close stops the dashboard with the run.
func (u *runUI) close() {
	if u == nil {
		return
	}
	if u.srv == nil {
		u.ln.Close() // the run ended before it started serving
		return
	}
	u.live.End()
	u.cancel()
	<-u.done
	u.srv.Close()
	fmt.Fprintf(u.a.stdout, "dashboard stopped with the run; to look again: rlhost ui %s\n", u.dir)
}

// observers passes the runner's reports to each of its members.
type observers []runner.Observer

func (o observers) StepStarted(step int) {
	for _, x := range o {
		x.StepStarted(step)
	}
}

func (o observers) EpisodeStarted() {
	for _, x := range o {
		x.EpisodeStarted()
	}
}

// jobRecord is job.json for a run of f: the job file as it was, the
// variables given, and the run block's values.
func jobRecord(f *config.File, runID string, vars map[string]string) output.Job {
	j := output.Job{RunID: runID, ConfigPath: f.Path, Vars: vars, Steps: f.Run.Steps, BatchSize: f.Run.BatchSize,
		GroupSize: f.Run.GroupSize, Concurrency: f.Run.Concurrency, MaxTurns: f.Run.MaxTurns, Seed: f.Run.Seed,
		EpisodeTimeout: f.Run.EpisodeTimeout, Env: f.Run.Env, Policy: f.Run.Policy}
	if abs, err := filepath.Abs(f.Path); err == nil {
		j.ConfigPath = abs
	}
	if src := f.Files[f.Path]; src != nil {
		j.Source = string(src.Bytes)
	}
	return j
}
