package main

// Benchmarks of the host path (run by `make bench`, never by `make test`):
//   - the plugin round trip of a no-op sandbox exec through host, env,
//     lent sandbox and backend, against a direct backend exec and a bare
//     fork/exec;
//   - end-to-end scored completions per second on the coding env, against
//     bare python3 processes running the same programs.
// Each benchmark appends Markdown rows to $RLHOST_BENCH_MD when it is set.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/sdk/envplugin"
	"github.com/rlhost/rlhost/core/sdk/envplugin/envtest"
	"github.com/rlhost/rlhost/core/sdk/sandboxplugin"
	"github.com/rlhost/rlhost/core/sdk/wire/lend"
	"github.com/rlhost/rlhost/host/config"
	"github.com/rlhost/rlhost/host/job"
	"github.com/rlhost/rlhost/host/pluginmgr"
)

func benchRow(b *testing.B, line string) {
	b.Helper()
	path := os.Getenv("RLHOST_BENCH_MD")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	fmt.Fprintln(f, line)
}

func median(xs []time.Duration) time.Duration {
	s := append([]time.Duration(nil), xs...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// BenchmarkPluginRoundTrip times one no-op exec (`true`) these ways, in
// interleaved rounds, in a new order each round, so machine drift and what
// each path follows hit them all alike:
//
//	bare:    fork/exec of true from the host process, no sandbox
//	backend: host → backend plugin (gRPC) → sandbox exec of true
//	env:     host → env plugin Step → the backend's lent-sandbox socket →
//	         sandbox exec of true (a sandbox its backend lends, as `rlhost
//	         run` lends them)
//	relay:   host → env plugin Step → the host's lent-sandbox socket →
//	         backend plugin (gRPC) → sandbox exec of true (how the host
//	         lends a sandbox whose backend lends none)
//	step:    host → env plugin Step that returns at once (one plugin round
//	         trip, the floor of any call into a plugin process)
//
// env − backend is the cost the env hop adds per sandbox call: the Step's
// round trip, with the env's Exec in place of the host's.
func BenchmarkPluginRoundTrip(b *testing.B) {
	for _, isolation := range []string{"namespaces", "none"} {
		b.Run(isolation, func(b *testing.B) { benchRoundTrip(b, isolation) })
	}
}

// probeSetup is the probe env and a local backend, started as the host
// starts them, with one sandbox created to lend.
type probeSetup struct {
	backend *sandboxplugin.Client
	env     envplugin.Environment
	lent    *envtest.BackendSandbox // relayed by the host
	leased  *leasedSandbox          // lent by the backend
}

// leasedSandbox is a sandbox its backend lends, as the runner hands it to
// an env client.
type leasedSandbox struct {
	*envtest.BackendSandbox
	lease lend.Lease
}

func (s *leasedSandbox) Lease() lend.Lease { return s.lease }

// startProbe starts the probe env and a local backend with the given
// isolation; everything is stopped when the benchmark ends.
func startProbe(b *testing.B, isolation string) probeSetup {
	b.Helper()
	ctx := context.Background()
	probe := buildPlugin(b, "./testdata/probeenv", "probeenv")
	src := fmt.Sprintf(`
sandbox "s" {
  backend = "local"
  isolation = %q
}
env "probe" {
  plugin = %q
  marker = "/nonexistent/never"
}
`, isolation, probe)
	f, diags := config.Parse(filepath.Join(b.TempDir(), "bench.hcl"), []byte(src), nil)
	if diags.HasErrors() {
		b.Fatal(diags)
	}
	mgr, err := pluginmgr.New(pluginmgr.Options{Self: rlhostBin, Builtins: builtinNames(), Logger: hclog.NewNullLogger()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { mgr.StopAll(context.Background()) })
	bin, d := job.StartBackend(ctx, f, f.Sandboxes[0], mgr, "bench")
	if d.HasErrors() {
		b.Fatal(d)
	}
	ein, d := job.StartEnv(ctx, f, f.Envs[0], mgr, "bench")
	if d.HasErrors() {
		b.Fatal(d)
	}
	backend, err := bin.Backend(ctx)
	if err != nil {
		b.Fatal(err)
	}
	env, err := ein.Env(ctx)
	if err != nil {
		b.Fatal(err)
	}
	info, err := backend.Create(ctx, core.SandboxSpec{})
	if err != nil {
		b.Fatal(err)
	}
	// Registered after StopAll, so it runs before it.
	b.Cleanup(func() { backend.Destroy(context.Background(), info.ID) })
	lent := &envtest.BackendSandbox{Backend: backend, SandboxID: info.ID, DefaultTimeout: 10 * time.Second}
	linfo, lease, err := backend.CreateLent(ctx, core.SandboxSpec{}, 10*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { backend.Destroy(context.Background(), linfo.ID) })
	if lease.Socket == "" {
		b.Fatal("the local backend lent no sandbox")
	}
	leased := &leasedSandbox{&envtest.BackendSandbox{Backend: backend, SandboxID: linfo.ID, DefaultTimeout: 10 * time.Second}, lease}
	return probeSetup{backend: backend, env: env, lent: lent, leased: leased}
}

func benchRoundTrip(b *testing.B, isolation string) {
	ctx := context.Background()
	p := startProbe(b, isolation)
	backend, id := p.backend, p.lent.SandboxID
	relay, _, err := p.env.NewEpisode(ctx, envplugin.Episode{ID: "bench-relay", Task: core.Task{ID: "t0"}, Sandbox: p.lent})
	if err != nil {
		b.Fatal(err)
	}
	defer relay.End(ctx, core.FinishCancelled)
	sess, _, err := p.env.NewEpisode(ctx, envplugin.Episode{ID: "bench", Task: core.Task{ID: "t0"}, Sandbox: p.leased})
	if err != nil {
		b.Fatal(err)
	}
	defer sess.End(ctx, core.FinishCancelled)
	truePath, err := exec.LookPath("true")
	if err != nil {
		b.Fatal(err)
	}
	req := core.ExecRequest{Command: []string{"true"}, Timeout: 10 * time.Second}
	reply := core.Message{Role: core.RoleAssistant, Content: "exec"}
	noop := core.Message{Role: core.RoleAssistant, Content: "noop"}
	var bare, direct, full, relayed, step []time.Duration
	// Each round runs the paths in a new order: in a fixed one, what a
	// path follows (a warm backend, a busy env) shifts its figure.
	paths := []struct {
		times *[]time.Duration
		run   func() error
	}{
		{&bare, func() error { return exec.Command(truePath).Run() }},
		{&direct, func() error {
			res, err := backend.Exec(ctx, id, req)
			if err == nil && res.ExitCode != 0 {
				err = fmt.Errorf("exit %d", res.ExitCode)
			}
			return err
		}},
		{&full, func() error { _, err := sess.Step(ctx, reply); return err }},
		{&step, func() error { _, err := sess.Step(ctx, noop); return err }},
		{&relayed, func() error { _, err := relay.Step(ctx, reply); return err }},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rng.Shuffle(len(paths), func(x, y int) { paths[x], paths[y] = paths[y], paths[x] })
		for _, p := range paths {
			t0 := time.Now()
			if err := p.run(); err != nil {
				b.Fatal(err)
			}
			*p.times = append(*p.times, time.Since(t0))
		}
	}
	b.StopTimer()
	mb, md, mf, ms, mr := median(bare), median(direct), median(full), median(step), median(relayed)
	b.ReportMetric(us(mb), "bare-us")
	b.ReportMetric(us(md), "backend-us")
	b.ReportMetric(us(mf), "env-us")
	b.ReportMetric(us(mf-md), "env-hop-us")
	b.ReportMetric(us(ms), "noop-step-us")
	b.ReportMetric(us(mr-md), "relay-hop-us")
	if b.N >= 20 {
		benchRow(b, fmt.Sprintf("| no-op exec, isolation %s | %d | %.0f | %.0f | %.0f | %.0f | %.2f× | %.0f | %.0f | %.0f |",
			isolation, b.N, us(mb), us(md), us(mf), us(mf-md), float64(mf)/float64(md), us(ms), us(mr), us(mr-md)))
	}
}

// BenchmarkEpisodeLend times what lending a sandbox adds to an episode:
// NewEpisode, one no-op Step and End on the probe env, with a sandbox its
// backend lends (its socket and token passed on), with one the host lends
// (leased on the host's one lent-sandbox socket for this env, which the env
// connected to at its first episode and keeps) and without one, in
// interleaved rounds. No sandbox call is made: lend-us is the host lease's
// cost alone, backend-lend-us the backend lease's.
func BenchmarkEpisodeLend(b *testing.B) {
	ctx := context.Background()
	p := startProbe(b, "none")
	noop := core.Message{Role: core.RoleAssistant, Content: "noop"}
	episode := func(id string, sb envplugin.Sandbox) time.Duration {
		t0 := time.Now()
		sess, _, err := p.env.NewEpisode(ctx, envplugin.Episode{ID: id, Task: core.Task{ID: "t0"}, Sandbox: sb})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := sess.Step(ctx, noop); err != nil {
			b.Fatal(err)
		}
		if _, err := sess.End(ctx, core.FinishCancelled); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	var lent, leased, bare []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		lent = append(lent, episode(fmt.Sprintf("lent-%d", i), p.lent))
		leased = append(leased, episode(fmt.Sprintf("leased-%d", i), p.leased))
		bare = append(bare, episode(fmt.Sprintf("bare-%d", i), nil))
	}
	b.StopTimer()
	ml, mb, mk := median(lent), median(bare), median(leased)
	b.ReportMetric(us(ml), "lent-episode-us")
	b.ReportMetric(us(mk), "backend-lent-episode-us")
	b.ReportMetric(us(mb), "bare-episode-us")
	b.ReportMetric(us(ml-mb), "lend-us")
	b.ReportMetric(us(mk-mb), "backend-lend-us")
	if b.N > 1 {
		benchRow(b, fmt.Sprintf("| NewEpisode + no-op Step + End, isolation none | %d | %.0f | %.0f | %.0f | %.0f | %.0f |", b.N, us(mb), us(mk), us(mk-mb), us(ml), us(ml-mb)))
	}
}

// The coding programs used for throughput: a correct solution per task.
var throughputSolutions = map[string]string{
	"sort_list":    "def sort_list(xs):\n    out = []\n    for x in xs:\n        i = 0\n        while i < len(out) and out[i] <= x:\n            i += 1\n        out.insert(i, x)\n    return out\n",
	"max_subarray": "def max_subarray(xs):\n    best = cur = xs[0]\n    for x in xs[1:]:\n        cur = max(x, cur + x)\n        best = max(best, cur)\n    return best\n",
}

// BenchmarkCodingThroughput runs `rlhost run` on the coding env with a
// replay policy (so the policy costs nothing) and reports scored completions
// per second, then runs the same number of bare python3 processes executing
// the same solutions plus a comparable test loop, at the same concurrency.
//
// "namespaces" is the local backend's default: sandboxes started by the
// dedicated rlhost-sandbox-init, as `make build` installs it beside rlhost,
// and reset and reused once destroyed (recycle); "namespaces-pool" adds a
// pool filled before the first episode; "namespaces-fresh" creates and
// destroys a sandbox per completion (recycle = false);
// "namespaces-reexec" does too, re-executing rlhost itself as the init (the
// fallback when that binary is missing), whose package initialisation runs
// on every sandbox creation.
func BenchmarkCodingThroughput(b *testing.B) {
	const group, smallGroup, concurrency = 32, 8, 8
	episodes := 2 * group
	dir := b.TempDir()
	var lines []string
	for task, sol := range throughputSolutions {
		var comps []string
		for i := 0; i < group; i++ {
			comps = append(comps, fmt.Sprintf("%q", sol))
		}
		lines = append(lines, fmt.Sprintf(`{"task_id":%q,"completions":[%s]}`, task, strings.Join(comps, ",")))
	}
	os.WriteFile(filepath.Join(dir, "replay.jsonl"), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	initHelper := buildPlugin(b, "../../../plugins/local/cmd/rlhost-sandbox-init", "sandbox-init")
	for _, shape := range []struct{ name, isolation, helper, extra string }{
		{"namespaces", "namespaces", initHelper, ""},
		{"namespaces-pool", "namespaces", initHelper, fmt.Sprintf("pool_size = %d", concurrency)},
		{"namespaces-fresh", "namespaces", initHelper, "recycle = false"},
		{"namespaces-reexec", "namespaces", rlhostBin, "recycle = false"},
		{"none", "none", rlhostBin, ""},
	} {
		isolation := shape.isolation
		b.Run(shape.name, func(b *testing.B) {
			writeJob := func(name string, group int) {
				os.WriteFile(filepath.Join(dir, name), []byte(fmt.Sprintf(`
run {
  name = "throughput"
  batch_size = 2
  group_size = %d
  concurrency = %d
}
sandbox "local" {
  backend = "local"
  isolation = %q
  helper = %q
  timeout = "10s"
  %s
}
env "coding" {
  tasks = "builtin"
  timeout = "30s"
}
policy "replay" {
  provider = "replay"
  file = "replay.jsonl"
}
`, group, concurrency, isolation, shape.helper, shape.extra)), 0o644)
			}
			writeJob("job.hcl", group)
			writeJob("small.hcl", smallGroup)
			run := func(job string, want int) (time.Duration, time.Duration) {
				t0 := time.Now()
				out := filepath.Join(dir, "out-"+shape.name)
				cmd := exec.Command(rlhostBin, "run", job, "--overwrite", "--out", out)
				cmd.Dir = dir
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("rlhost run: %v\n%s", err, out)
				}
				// Every completion is correct: a run with timeouts (a loaded
				// machine, a short limit) would time how fast it fails.
				trs := readTrajectories(b, filepath.Join(out, "trajectories.jsonl"))
				if len(trs) != want {
					b.Fatalf("%s: %d trajectories, want %d", job, len(trs), want)
				}
				for _, tr := range trs {
					if tr.Reward != 1 {
						b.Fatalf("%s/%d scored %v, want 1: finish %q, error %q, metrics %v, info %v", tr.TaskID, tr.Index, tr.Reward, tr.FinishReason, tr.Error, tr.Metrics, tr.Info)
					}
				}
				return time.Since(t0), cpuTime(cmd.ProcessState)
			}
			var runs, bares, runCPUs, bareCPUs, smallCPUs []time.Duration
			for i := 0; i < b.N; i++ {
				wall, cpu := run("job.hcl", episodes)
				runs, runCPUs = append(runs, wall), append(runCPUs, cpu)
				_, cpu = run("small.hcl", 2*smallGroup)
				smallCPUs = append(smallCPUs, cpu)
				wall, cpu = bareThroughput(b, episodes, concurrency)
				bares, bareCPUs = append(bares, wall), append(bareCPUs, cpu)
			}
			mr, mb := median(runs), median(bares)
			mrc, mbc := median(runCPUs), median(bareCPUs)
			// What one more completion costs, the run's fixed costs
			// (processes, pool, shutdown) taken out: the figure for a
			// training run of thousands of episodes.
			marginal := (mrc - median(smallCPUs)).Seconds() * 1e3 / float64(episodes-2*smallGroup)
			if b.N == 1 {
				return // the framework's probe run; the real pass reports
			}
			rlhostRate := float64(episodes) / mr.Seconds()
			bareRate := float64(episodes) / mb.Seconds()
			b.ReportMetric(rlhostRate, "completions/s")
			b.ReportMetric(bareRate, "bare-python/s")
			// CPU time per completion holds up on a shared machine, where
			// wall-clock rates mostly say how busy the neighbours were.
			cpuPer, bareCPUPer := mrc.Seconds()*1e3/float64(episodes), mbc.Seconds()*1e3/float64(episodes)
			b.ReportMetric(cpuPer, "cpu-ms/completion")
			b.ReportMetric(bareCPUPer, "cpu-ms/bare-python")
			b.ReportMetric(marginal, "marginal-cpu-ms/completion")
			benchRow(b, fmt.Sprintf("| coding env, %s | %d episodes, concurrency %d, %d CPUs | %.1f | %.1f | %.2f | %.1f | %.1f | %.2f | %.1f | %.2f |",
				shape.name, episodes, concurrency, runtime.NumCPU(), rlhostRate, bareRate, rlhostRate/bareRate,
				cpuPer, bareCPUPer, bareCPUPer/cpuPer, marginal, bareCPUPer/marginal))
		})
	}
}

// cpuTime is the user and system CPU time of a finished process and of the
// descendants it waited for (plugins, sandbox inits, interpreters).
func cpuTime(ps *os.ProcessState) time.Duration {
	return ps.UserTime() + ps.SystemTime()
}

// bareThroughput runs n python3 processes, concurrency at a time, each
// defining a solution and calling it on test inputs the way the coding
// harness does, and returns the wall time and the processes' CPU time.
func bareThroughput(b *testing.B, n, concurrency int) (wall, cpu time.Duration) {
	progs := []string{
		throughputSolutions["sort_list"] + "for xs in [[3,1,2],[],[5,4,3,2,1],[1,1,0]]:\n    assert sort_list(list(xs)) == sorted(xs)\n",
		throughputSolutions["max_subarray"] + "for xs in [[1,-2,3,4],[-1],[2,2,-5,3]]:\n    max_subarray(xs)\n",
	}
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	var mu sync.Mutex
	t0 := time.Now()
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			cmd := exec.Command("/usr/bin/python3", "-c", progs[i%2])
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Errorf("python3: %v %s", err, out)
				return
			}
			mu.Lock()
			cpu += cpuTime(cmd.ProcessState)
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	return time.Since(t0), cpu
}
