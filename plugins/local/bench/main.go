// Command bench measures the local sandbox backend against baselines taken
// in the same run (bare fork/exec, and bubblewrap) and prints Markdown rows
// for BENCHMARKS.md.
//
// It is a program rather than a Go benchmark because the binary must also
// serve as the sandbox init (local.Reexec), and because the figures are
// latency percentiles and ratios, not ns/op. It does not assert anything.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/plugins/local"
)

func main() {
	if local.Reexec() {
		return
	}
	n := flag.Int("n", 200, "iterations per latency figure")
	conc := flag.Int("concurrent", 64, "sandboxes alive at once in the throughput test")
	only := flag.String("only", "", `"variants": only the bwrap baseline and the root view / seccomp variants; "floor": only cold create and warm exec, each iteration taking turns with its baseline; "warm": only the warm exec and its baseline, with no create in the loop (a create started without the launcher forks this process, and the copy-on-write faults it leaves land on whatever runs next); "cpu": the CPU time of a sandbox's create, exec and destroy against bwrap and a python3 start`)
	prev := flag.String("prev-helper", "", `with -only floor or warm: also time cold creates and warm execs with this helper binary as the init, started directly (an earlier build, for a before/after in one run)`)
	prevLauncher := flag.Bool("prev-launcher", false, "with -prev-helper: start its inits through its own launcher, as the backend does as root (the helper must speak this build's sandbox protocol)")
	self := flag.Bool("helper-self", false, "re-execute this binary as the sandbox init instead of rlhost-sandbox-init beside it")
	stateDir := flag.String("state-dir", filepath.Join(os.TempDir(), fmt.Sprintf("rlhost-local-bench-%d", os.Geteuid())),
		"state dir; fixed by default so a run that crashed is reaped by the next")
	flag.Parse()
	helper := ""
	if *self {
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		helper = exe
	}
	if *only == "floor" || *only == "warm" {
		if err := runFloor(*n, *stateDir, helper, *prev, *prevLauncher, *only == "warm"); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *only == "cpu" {
		if err := runCPU(*n, *stateDir, helper); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *only == "variants" {
		err := runVariants(*n, *stateDir, helper)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*n, *conc, *stateDir, helper); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func newBackend(ctx context.Context, stateDir, helper string, cfg map[string]any) (*local.Backend, error) {
	cfg["state_dir"] = stateDir
	if _, ok := cfg["recycle"]; !ok {
		// These figures are of creating and destroying sandboxes; reuse
		// is BenchmarkCodingThroughput's.
		cfg["recycle"] = false
	}
	if helper != "" {
		cfg["helper"] = helper
	}
	js, _ := json.Marshal(cfg)
	b := local.New()
	if d := b.Configure(ctx, schema.Config{Name: "bench", JSON: js}, core.SandboxSpec{}); d.HasErrors() {
		return nil, d.Err()
	}
	return b, nil
}

type stats struct{ p10, p50, p95 time.Duration }

func measure(n int, f func() error) (stats, error) {
	ds := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if err := f(); err != nil {
			return stats{}, err
		}
		ds = append(ds, time.Since(t0))
	}
	return pct(ds), nil
}

// measurePair times a and b n times each, taking turns (b first every
// other round), so a machine that speeds up or slows down during the run
// weighs on both alike.
func measurePair(n int, a, b func() error) (stats, stats, error) {
	var da, db []time.Duration
	for i := 0; i < n; i++ {
		for j := 0; j < 2; j++ {
			f, into := a, &da
			if (i+j)%2 == 1 {
				f, into = b, &db
			}
			t0 := time.Now()
			if err := f(); err != nil {
				return stats{}, stats{}, err
			}
			*into = append(*into, time.Since(t0))
		}
	}
	return pct(da), pct(db), nil
}

// runOK execs argv in sandbox id and fails unless it exits 0.
func runOK(ctx context.Context, b *local.Backend, id string, argv ...string) error {
	r, err := b.Exec(ctx, id, core.ExecRequest{Command: argv})
	if err == nil && r.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %s", r.ExitCode, r.Stderr)
	}
	return err
}

// createAndRunTrue is a cold create and first exec of true; it returns
// the sandbox for the caller to destroy.
func createAndRunTrue(ctx context.Context, b *local.Backend) (string, error) {
	info, err := b.Create(ctx, core.SandboxSpec{})
	if err != nil {
		return "", err
	}
	return info.ID, runOK(ctx, b, info.ID, "true")
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

func bare(argv ...string) func() error {
	return func() error { return exec.Command(argv[0], argv[1:]...).Run() }
}

func machine() string {
	cpu := "unknown cpu"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	kr, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return fmt.Sprintf("%s, %d cores, Linux %s", cpu, runtime.NumCPU(), strings.TrimSpace(string(kr)))
}

// runVariants prints only the rows of variants, with their bwrap baseline.
func runVariants(n int, stateDir, helper string) error {
	m := machine()
	row := func(bench, command, baseline, figure, ratio string) {
		fmt.Printf("| %s | %s | %s | %s | %s | %s |\n", m, bench, command, baseline, figure, ratio)
	}
	fmt.Println("| machine | benchmark | command | baseline (same run) | local backend | ratio |")
	fmt.Println("|---|---|---|---|---|---|")
	return variants(context.Background(), n, stateDir, helper, row)
}

func run(n, conc int, stateDir, helper string) error {
	ctx := context.Background()
	m := machine()
	row := func(bench, command, baseline, figure, ratio string) {
		fmt.Printf("| %s | %s | %s | %s | %s | %s |\n", m, bench, command, baseline, figure, ratio)
	}
	fmt.Println("| machine | benchmark | command | baseline (same run) | local backend | ratio |")
	fmt.Println("|---|---|---|---|---|---|")

	bareTrue, err := measure(n, bare("/bin/true"))
	if err != nil {
		return fmt.Errorf("bare true: %w", err)
	}
	bwrapArgs := []string{"bwrap", "--unshare-all", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "/bin/true"}
	bwrap, bwrapErr := measure(n, bare(bwrapArgs...))

	// Cold: no pool.
	cold, err := newBackend(ctx, stateDir, helper, map[string]any{})
	if err != nil {
		return fmt.Errorf("configure: %w", err)
	}
	var toFirst []time.Duration
	cycle, err := measure(n, func() error {
		settle(cold)
		t0 := time.Now()
		info, err := cold.Create(ctx, core.SandboxSpec{})
		if err != nil {
			return err
		}
		if r, err := cold.Exec(ctx, info.ID, core.ExecRequest{Command: []string{"true"}}); err != nil || r.ExitCode != 0 {
			return fmt.Errorf("exec true: %v %+v", err, r)
		}
		toFirst = append(toFirst, time.Since(t0))
		return cold.Destroy(ctx, info.ID)
	})
	if err != nil {
		return fmt.Errorf("cold cycle: %w", err)
	}
	first := pct(toFirst)
	bw := "bwrap unavailable: " + fmt.Sprint(bwrapErr)
	ratio := "-"
	if bwrapErr == nil {
		bw = fmt.Sprintf("bwrap --unshare-all true p50 %s / p95 %s; bare exec p50 %s", ms(bwrap.p50), ms(bwrap.p95), ms(bareTrue.p50))
		ratio = fmt.Sprintf("%.2fx bwrap (p50)", float64(first.p50)/float64(bwrap.p50))
	}
	row("cold create → first exec", "true", bw, fmt.Sprintf("p50 %s / p95 %s", ms(first.p50), ms(first.p95)), ratio)
	row("cold create → exec → destroy", "true", bw, fmt.Sprintf("p50 %s / p95 %s", ms(cycle.p50), ms(cycle.p95)),
		fmt.Sprintf("%.2fx bwrap (p50)", float64(cycle.p50)/float64(bwrap.p50)))
	if bwrapErr == nil {
		if err := variants(ctx, n, stateDir, helper, row); err != nil {
			return err
		}
	}

	// Warm exec round trips in one sandbox.
	info, err := cold.Create(ctx, core.SandboxSpec{})
	if err != nil {
		return err
	}
	for _, argv := range [][]string{{"true"}, {"python3", "-c", "pass"}} {
		// The sandbox's PATH, not the caller's (which may hold shims).
		path, err := lookDefaultPath(argv[0])
		if err != nil {
			return err
		}
		settle(cold)
		base, in, err := measurePair(n, bare(append([]string{path}, argv[1:]...)...),
			func() error { return runOK(ctx, cold, info.ID, argv...) })
		if err != nil {
			return err
		}
		row("exec round trip, warm sandbox", strings.Join(argv, " "), "bare fork/exec, interleaved, p50 "+ms(base.p50),
			fmt.Sprintf("p50 %s / p95 %s", ms(in.p50), ms(in.p95)), fmt.Sprintf("%.2fx bare (p50)", float64(in.p50)/float64(base.p50)))
	}
	cold.Destroy(ctx, info.ID)
	cold.Shutdown(ctx)

	// Warm pool.
	poolSize := 16
	warm, err := newBackend(ctx, stateDir, helper, map[string]any{"pool_size": poolSize})
	if err != nil {
		return err
	}
	var fromPool []time.Duration
	for i := 0; i < n; i++ {
		waitPool(warm, poolSize)
		t0 := time.Now()
		info, err := warm.Create(ctx, core.SandboxSpec{})
		if err != nil {
			return err
		}
		if _, err := warm.Exec(ctx, info.ID, core.ExecRequest{Command: []string{"true"}}); err != nil {
			return err
		}
		fromPool = append(fromPool, time.Since(t0))
		warm.Destroy(ctx, info.ID)
	}
	p := pct(fromPool)
	row("pooled create → first exec", "true", "bare exec p50 "+ms(bareTrue.p50), fmt.Sprintf("p50 %s / p95 %s", ms(p.p50), ms(p.p95)),
		fmt.Sprintf("%.2fx bare (p50)", float64(p.p50)/float64(bareTrue.p50)))
	warm.Shutdown(ctx)

	// Many at once.
	many, err := newBackend(ctx, stateDir, helper, map[string]any{"max_sandboxes": conc + 1})
	if err != nil {
		return err
	}
	prog := "print(sum(i * i for i in range(20000)))"
	t0 := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	fails := 0
	for i := 0; i < conc; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			info, err := many.Create(ctx, core.SandboxSpec{})
			if err == nil {
				var r core.ExecResult
				r, err = many.Exec(ctx, info.ID, core.ExecRequest{Command: []string{"python3", "-c", prog}})
				if err == nil && r.ExitCode != 0 {
					err = fmt.Errorf("exit %d", r.ExitCode)
				}
				if derr := many.Destroy(ctx, info.ID); err == nil {
					err = derr
				}
			}
			if err != nil {
				mu.Lock()
				fails++
				mu.Unlock()
				fmt.Fprintln(os.Stderr, "concurrent:", err)
			}
		}()
	}
	wg.Wait()
	el := time.Since(t0)
	t1 := time.Now()
	for i := 0; i < conc; i++ {
		py, err := lookDefaultPath("python3")
		if err != nil {
			return err
		}
		if err := exec.Command(py, "-c", prog).Run(); err != nil {
			return err
		}
	}
	seq := time.Since(t1)
	row(fmt.Sprintf("%d sandboxes at once, create+python+destroy", conc), "python3 -c "+prog,
		fmt.Sprintf("%d bare sequential runs: %s", conc, ms(seq)),
		fmt.Sprintf("%s wall, %.0f sandboxes/s, %d failures", ms(el), float64(conc)/el.Seconds(), fails),
		fmt.Sprintf("%.2fx bare", float64(el)/float64(seq)))
	many.Shutdown(ctx)
	if fails > 0 {
		return fmt.Errorf("%d of %d concurrent sandboxes failed", fails, conc)
	}
	return nil
}

// variants measures what the root view, the seccomp filter and the cgroup
// limits cost: cold create → first exec, and a warm exec round trip, for
// the old whole-host view without a filter, the runtime view without a
// filter, the default (runtime view + filter + cgroups), and the runtime
// view with neither filter nor cgroups, which is the isolation that bwrap
// --unshare-all itself gives. bwrap and the variants take turns in every
// iteration, so a change in machine load hits all of them alike.
func variants(ctx context.Context, n int, stateDir, helper string, row func(bench, command, baseline, figure, ratio string)) error {
	type variant struct {
		name   string
		cfg    map[string]any
		b      *local.Backend
		warmID string
		cold   []time.Duration
		warm   []time.Duration
	}
	vs := []*variant{
		{name: `root_view = "host", seccomp = "off"`, cfg: map[string]any{"root_view": "host", "seccomp": "off"}},
		{name: `root_view = "runtime", seccomp = "off"`, cfg: map[string]any{"seccomp": "off"}},
		{name: `root_view = "runtime", seccomp = "default" (the default)`, cfg: map[string]any{}},
		{name: `root_view = "runtime", seccomp = "off", cgroup = "off" (no limits: bwrap's isolation)`, cfg: map[string]any{"seccomp": "off", "cgroup": "off"}},
	}
	for i, v := range vs {
		b, err := newBackend(ctx, filepath.Join(stateDir, fmt.Sprint("v", i)), helper, v.cfg)
		if err != nil {
			return fmt.Errorf("configure %s: %w", v.name, err)
		}
		defer b.Shutdown(ctx)
		info, err := b.Create(ctx, core.SandboxSpec{})
		if err != nil {
			return err
		}
		v.b, v.warmID = b, info.ID
	}
	bwrapRun := bare("bwrap", "--unshare-all", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "/bin/true")
	var bw []time.Duration
	all := make([]*local.Backend, len(vs))
	for i, v := range vs {
		all[i] = v.b
	}
	for i := 0; i < n; i++ {
		settle(all...)
		t0 := time.Now()
		if err := bwrapRun(); err != nil {
			return fmt.Errorf("bwrap: %w", err)
		}
		bw = append(bw, time.Since(t0))
		for _, v := range vs {
			settle(all...)
			t0 := time.Now()
			info, err := v.b.Create(ctx, core.SandboxSpec{})
			if err != nil {
				return err
			}
			if err := runOK(ctx, v.b, info.ID, "true"); err != nil {
				return err
			}
			v.cold = append(v.cold, time.Since(t0))
			if err := v.b.Destroy(ctx, info.ID); err != nil {
				return err
			}
			settle(v.b)
			t0 = time.Now()
			if err := runOK(ctx, v.b, v.warmID, "true"); err != nil {
				return err
			}
			v.warm = append(v.warm, time.Since(t0))
		}
	}
	bwrap, base := pct(bw), pct(vs[0].warm)
	for _, v := range vs {
		c, w := pct(v.cold), pct(v.warm)
		row("cold create → first exec, "+v.name, "true", fmt.Sprintf("bwrap --unshare-all true p10 %s / p50 %s", ms(bwrap.p10), ms(bwrap.p50)),
			fmt.Sprintf("p10 %s / p50 %s / p95 %s", ms(c.p10), ms(c.p50), ms(c.p95)), fmt.Sprintf("%.2fx bwrap (p50)", float64(c.p50)/float64(bwrap.p50)))
		row("exec round trip, warm sandbox, "+v.name, "true", fmt.Sprintf("whole-host view, no filter p10 %s / p50 %s", ms(base.p10), ms(base.p50)),
			fmt.Sprintf("p10 %s / p50 %s / p95 %s", ms(w.p10), ms(w.p50), ms(w.p95)), fmt.Sprintf("%.2fx (p50)", float64(w.p50)/float64(base.p50)))
	}
	return nil
}

func pct(ds []time.Duration) stats {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return stats{ds[len(ds)/10], ds[len(ds)/2], ds[len(ds)*95/100]}
}

// settle waits until no backend of bs is preparing sandbox entries and
// cgroups in the background (after each create), so that work is not
// timed as part of whatever runs next: a baseline or another backend.
func settle(bs ...*local.Backend) {
	for _, b := range bs {
		for i := 0; i < 2000 && b != nil && b.Preparing(); i++ {
			time.Sleep(100 * time.Microsecond)
		}
	}
}

// waitPool waits until the pool is refilled, so each pooled create measures
// a warm hit rather than the refill racing it.
func waitPool(b *local.Backend, want int) {
	for i := 0; i < 2000 && b.PoolLen() < want; i++ {
		time.Sleep(time.Millisecond)
	}
}

func lookDefaultPath(file string) (string, error) {
	for _, d := range []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"} {
		p := d + "/" + file
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in the default PATH", file)
}

// runFloor measures the two figures with goals relative to a floor: cold
// create → first exec of true against bwrap --unshare-all, and a warm exec
// round trip against a bare fork/exec. Every iteration runs the baseline
// and the backend back to back, so load on a shared machine hits both
// alike; the ratio of the medians is the figure to trust.
//
// With warmOnly, only the warm exec and its baseline are timed (and the
// earlier helper's warm exec), taking turns in alternating order.
func runFloor(n int, stateDir, helper, prevHelper string, prevLauncher, warmOnly bool) error {
	ctx := context.Background()
	m := machine()
	fmt.Println("| machine | benchmark | command | baseline (same run, interleaved) | local backend | ratio |")
	fmt.Println("|---|---|---|---|---|---|")
	b, err := newBackend(ctx, stateDir, helper, map[string]any{})
	if err != nil {
		return fmt.Errorf("configure: %w", err)
	}
	defer b.Shutdown(ctx)
	warm, err := b.Create(ctx, core.SandboxSpec{})
	if err != nil {
		return err
	}
	var prevB *local.Backend
	var prevID string
	if prevHelper != "" {
		// Started directly unless asked: an earlier build may know no
		// launcher role, or speak another protocol to it.
		if !prevLauncher {
			os.Setenv("RLHOST_LOCAL_LAUNCHER", "off")
		}
		prevB, err = newBackend(ctx, filepath.Join(stateDir, "prev"), prevHelper, map[string]any{})
		if err == nil {
			var info core.SandboxInfo
			info, err = prevB.Create(ctx, core.SandboxSpec{})
			prevID = info.ID
		}
		os.Unsetenv("RLHOST_LOCAL_LAUNCHER")
		if err != nil {
			return fmt.Errorf("previous helper: %w", err)
		}
		defer prevB.Shutdown(ctx)
	}
	truePath, err := lookDefaultPath("true")
	if err != nil {
		return err
	}
	bwrapRun := bare("bwrap", "--unshare-all", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", truePath)
	bareRun := bare(truePath)
	var bw, cold, direct, bareT, warmT, prevT, prevCold []time.Duration
	timed := func(into *[]time.Duration, f func() error) error {
		settle(b, prevB)
		t0 := time.Now()
		err := f()
		*into = append(*into, time.Since(t0))
		return err
	}
	execTrue := func(id string) error { return runOK(ctx, b, id, "true") }
	if warmOnly {
		return runWarm(n, m, bareRun, func() error { return execTrue(warm.ID) }, prevB, prevID, prevHelper)
	}
	for i := 0; i < n; i++ {
		if err := timed(&bw, bwrapRun); err != nil {
			return fmt.Errorf("bwrap: %w", err)
		}
		coldOnce := func(b *local.Backend, into *[]time.Duration) error {
			var id string
			if err := timed(into, func() (err error) {
				id, err = createAndRunTrue(ctx, b)
				return err
			}); err != nil {
				return fmt.Errorf("cold create: %w", err)
			}
			return b.Destroy(ctx, id)
		}
		// An earlier init started by its own launcher takes turns with
		// this one, right beside it and in alternating order, so neither
		// always follows the direct create's copy-on-write faults.
		pair := prevB != nil && prevLauncher
		if pair && i%2 == 1 {
			if err := coldOnce(prevB, &prevCold); err != nil {
				return fmt.Errorf("previous helper: %w", err)
			}
		}
		if err := coldOnce(b, &cold); err != nil {
			return err
		}
		if pair && i%2 == 0 {
			if err := coldOnce(prevB, &prevCold); err != nil {
				return fmt.Errorf("previous helper: %w", err)
			}
		}
		var id string
		// The same, with every init started from this process instead of
		// the launcher (the backend reads the switch at each create).
		os.Setenv("RLHOST_LOCAL_LAUNCHER", "off")
		err := timed(&direct, func() (err error) {
			id, err = createAndRunTrue(ctx, b)
			return err
		})
		os.Unsetenv("RLHOST_LOCAL_LAUNCHER")
		if err != nil {
			return fmt.Errorf("cold create, direct: %w", err)
		}
		if err := b.Destroy(ctx, id); err != nil {
			return err
		}
		if err := timed(&bareT, bareRun); err != nil {
			return err
		}
		if err := timed(&warmT, func() error { return execTrue(warm.ID) }); err != nil {
			return fmt.Errorf("warm exec: %w", err)
		}
		if prevB != nil {
			if !pair {
				os.Setenv("RLHOST_LOCAL_LAUNCHER", "off")
				err := timed(&prevCold, func() (err error) {
					id, err = createAndRunTrue(ctx, prevB)
					return err
				})
				os.Unsetenv("RLHOST_LOCAL_LAUNCHER")
				if err != nil {
					return fmt.Errorf("cold create, previous helper: %w", err)
				}
				if err := prevB.Destroy(ctx, id); err != nil {
					return err
				}
			}
			if err := timed(&prevT, func() error { return runOK(ctx, prevB, prevID, "true") }); err != nil {
				return fmt.Errorf("warm exec, previous helper: %w", err)
			}
		}
	}
	pb, pc, pd, pr, pw := pct(bw), pct(cold), pct(direct), pct(bareT), pct(warmT)
	fmt.Printf("| %s | cold create → first exec | true | bwrap --unshare-all true p10 %s / p50 %s | p10 %s / p50 %s / p95 %s | %.2fx bwrap (p50) |\n",
		m, ms(pb.p10), ms(pb.p50), ms(pc.p10), ms(pc.p50), ms(pc.p95), float64(pc.p50)/float64(pb.p50))
	fmt.Printf("| %s | cold create → first exec, inits started without the launcher (RLHOST_LOCAL_LAUNCHER=off) | true | bwrap --unshare-all true p10 %s / p50 %s | p10 %s / p50 %s / p95 %s | %.2fx bwrap (p50) |\n",
		m, ms(pb.p10), ms(pb.p50), ms(pd.p10), ms(pd.p50), ms(pd.p95), float64(pd.p50)/float64(pb.p50))
	fmt.Printf("| %s | exec round trip, warm sandbox | true | bare fork/exec p10 %s / p50 %s | p10 %s / p50 %s / p95 %s | %.2fx bare (p50) |\n",
		m, ms(pr.p10), ms(pr.p50), ms(pw.p10), ms(pw.p50), ms(pw.p95), float64(pw.p50)/float64(pr.p50))
	if prevB != nil {
		pc := pct(prevCold)
		how := "started directly"
		if prevLauncher {
			how = "started by its launcher"
		}
		fmt.Printf("| %s | cold create → first exec, init = %s, %s | true | bwrap --unshare-all true p10 %s / p50 %s | p10 %s / p50 %s / p95 %s | %.2fx bwrap (p50) |\n",
			m, prevHelper, how, ms(pb.p10), ms(pb.p50), ms(pc.p10), ms(pc.p50), ms(pc.p95), float64(pc.p50)/float64(pb.p50))
		pp := pct(prevT)
		fmt.Printf("| %s | exec round trip, warm sandbox, init = %s | true | bare fork/exec p10 %s / p50 %s | p10 %s / p50 %s / p95 %s | %.2fx bare (p50) |\n",
			m, prevHelper, ms(pr.p10), ms(pr.p50), ms(pp.p10), ms(pp.p50), ms(pp.p95), float64(pp.p50)/float64(pr.p50))
	}
	return nil
}

// runWarm times warm execs of true in a sandbox (and in one whose init is
// prevHelper, when prevB is set) against a bare fork/exec, in turns whose
// order alternates, and prints the rows.
func runWarm(n int, m string, bareRun, warmRun func() error, prevB *local.Backend, prevID, prevHelper string) error {
	ctx := context.Background()
	prevRun := func() error { return runOK(ctx, prevB, prevID, "true") }
	var bareT, warmT, prevT []time.Duration
	type turn struct {
		name string
		into *[]time.Duration
		f    func() error
	}
	turns := []turn{{"bare", &bareT, bareRun}, {"warm exec", &warmT, warmRun}}
	if prevB != nil {
		turns = append(turns, turn{"warm exec, previous helper", &prevT, prevRun})
	}
	for i := 0; i < n; i++ {
		for j := range turns {
			t := turns[j]
			if i%2 == 1 {
				t = turns[len(turns)-1-j]
			}
			t0 := time.Now()
			if err := t.f(); err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
			*t.into = append(*t.into, time.Since(t0))
		}
	}
	pr, pw := pct(bareT), pct(warmT)
	fmt.Printf("| %s | exec round trip, warm sandbox, no creates in the loop | true | bare fork/exec p10 %s / p50 %s | p10 %s / p50 %s / p95 %s | %.2fx bare (p50) |\n",
		m, ms(pr.p10), ms(pr.p50), ms(pw.p10), ms(pw.p50), ms(pw.p95), float64(pw.p50)/float64(pr.p50))
	if prevB != nil {
		pp := pct(prevT)
		fmt.Printf("| %s | exec round trip, warm sandbox, no creates in the loop, init = %s | true | bare fork/exec p10 %s / p50 %s | p10 %s / p50 %s / p95 %s | %.2fx bare (p50) |\n",
			m, prevHelper, ms(pr.p10), ms(pr.p50), ms(pp.p10), ms(pp.p50), ms(pp.p95), float64(pp.p50)/float64(pr.p50))
	}
	return nil
}
