package main

// BenchmarkCluster: one rlhost host driving a simulated cluster, run by
// `make bench` (scripts/bench.d/85-cluster.sh), never by `make test`.
//
// The host runs in this process as `rlhost run` runs it (job.Prepare, the
// real mbpp env and daytona backend plugins as child processes, the vllm
// policy with base_urls, the runner), with a simulated trainer as its
// step sink. The cluster runs in another process (scripts/simcluster):
// fakevllm servers with the throughput model playing an MBPP agent, and
// fakedaytona with its latency model, which runs the sandbox commands for
// real. So this process's CPU time plus its plugins' is the host's cost,
// and the cluster's is not in it.
//
// Each mode (max_off_policy_steps 0, then the others) runs on a fresh
// cluster. Scale with RLHOST_SIM_EPISODES (per mode, default 10000),
// RLHOST_SIM_CONCURRENCY (default the smaller of 1000 and a tenth of the
// episodes), RLHOST_SIM_MODES (default "0,1,2") and RLHOST_SIM_PEAK_DECODE
// (each server's peak decode rate in tokens/s, default 700: simulated
// GPUs slow enough that this machine's real sandbox commands keep up).

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/host/config"
	"github.com/rlhost/rlhost/host/job"
	"github.com/rlhost/rlhost/host/output"
	"github.com/rlhost/rlhost/host/pluginmgr"
	"github.com/rlhost/rlhost/host/policy"
	"github.com/rlhost/rlhost/host/policy/fakevllm"
	"github.com/rlhost/rlhost/host/runner"
)

// simScale is the bench's size, from the environment.
type simScale struct {
	episodes, concurrency, group, steps int
	modes                               []int
	peakDecode                          float64
}

func clusterScale(b *testing.B) simScale {
	b.Helper()
	num := func(name string, def int) int {
		v := os.Getenv(name)
		if v == "" {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("%s=%q: want a positive integer", name, v)
		}
		return n
	}
	s := simScale{episodes: num("RLHOST_SIM_EPISODES", 10000), group: 8, peakDecode: float64(num("RLHOST_SIM_PEAK_DECODE", 700))}
	s.concurrency = num("RLHOST_SIM_CONCURRENCY", max(s.group, min(1000, s.episodes/10)))
	// A step is as many episodes as run at once, so a synchronous step
	// fills the concurrency; the batch is a whole number of groups.
	perStep := max(s.group, s.concurrency/s.group*s.group)
	s.steps = max(2, s.episodes/perStep)
	for _, m := range strings.Split(cmpOr(os.Getenv("RLHOST_SIM_MODES"), "0,1,2"), ",") {
		k, err := strconv.Atoi(strings.TrimSpace(m))
		if err != nil || k < 0 {
			b.Fatalf("RLHOST_SIM_MODES=%q: want max_off_policy_steps values such as 0,1,2", os.Getenv("RLHOST_SIM_MODES"))
		}
		s.modes = append(s.modes, k)
	}
	if s.modes[0] != 0 {
		// The synchronous run sizes the simulated training.
		s.modes = append([]int{0}, slices.DeleteFunc(s.modes, func(k int) bool { return k == 0 })...)
	}
	return s
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (s simScale) batch() int { return max(1, s.concurrency/s.group) }

// cluster is a running scripts/simcluster process.
type cluster struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	ep    struct {
		Model   string   `json:"model"`
		VLLM    []string `json:"vllm"`
		Daytona struct {
			URL    string `json:"url"`
			APIKey string `json:"api_key"`
		} `json:"daytona"`
		Control  string          `json:"control"`
		Settings json.RawMessage `json:"settings"`
	}
}

func startCluster(b *testing.B, bin string, s simScale) *cluster {
	b.Helper()
	dataset, _ := filepath.Abs("../../../examples/mbpp/sample.jsonl")
	c := &cluster{cmd: exec.Command(bin, "-servers", "4", "-dataset", dataset, "-peak-decode", fmt.Sprint(s.peakDecode),
		"-half-batch", "32", "-max-batch", "256", "-think-tokens", "150", "-wrong-first", "0.3")}
	c.cmd.Stderr = os.Stderr
	var err error
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		b.Fatal(err)
	}
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadBytes('\n')
	if err != nil {
		c.stop()
		b.Fatalf("simcluster: %v", err)
	}
	if err := json.Unmarshal(line, &c.ep); err != nil {
		c.stop()
		b.Fatalf("simcluster said %q: %v", line, err)
	}
	return c
}

// stop ends the cluster: closing stdin tells it to.
func (c *cluster) stop() {
	c.stdin.Close()
	done := make(chan struct{})
	go func() { c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		c.cmd.Process.Kill()
		<-done
	}
}

func (c *cluster) get(b *testing.B, url string, v any) {
	b.Helper()
	resp, err := http.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		b.Fatalf("GET %s: %v", url, err)
	}
}

// stats reads each server's statistics from its own route.
func (c *cluster) stats(b *testing.B) []fakevllm.Stats {
	var out []fakevllm.Stats
	for _, u := range c.ep.VLLM {
		var s fakevllm.Stats
		c.get(b, strings.TrimSuffix(u, "/v1")+fakevllm.StatsRoute, &s)
		out = append(out, s)
	}
	return out
}

func (c *cluster) liveSandboxes(b *testing.B) int {
	var live map[string]int
	c.get(b, c.ep.Control+"/sandboxes", &live)
	return live["daytona"]
}

// simTrainer is the step sink standing in for GRPO: it takes trainFor
// (a set time, or a share of the step's rollout), then loads a new
// adapter into every server through the vllm policy, as weights_sync =
// "lora" does, so the versions the turns record move.
type simTrainer struct {
	policy   policy.Adapters
	dir      string
	trainFor func(st *runner.Step) time.Duration
	// lastRollout, when set, is called as the last step reaches the
	// sink: every rollout of the run has ended.
	last        int
	lastRollout func()

	mu      sync.Mutex
	trained []time.Duration
	rollout []time.Duration
}

func (s *simTrainer) EndStep(ctx context.Context, st *runner.Step) error {
	if st.Interrupted {
		return nil
	}
	if st.Index == s.last && s.lastRollout != nil {
		s.lastRollout()
	}
	d := s.trainFor(st)
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return ctx.Err()
	}
	s.mu.Lock()
	s.trained = append(s.trained, d)
	s.rollout = append(s.rollout, st.Rollout)
	s.mu.Unlock()
	version := st.Index + 1
	dir := filepath.Join(s.dir, fmt.Sprintf("step-%d", version))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, data := range map[string]string{"adapter_config.json": `{"r": 8, "lora_alpha": 16}`, "adapter_model.safetensors": "{}"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			return err
		}
	}
	return s.policy.SwitchAdapter(ctx, fmt.Sprintf("sim-step-%d", version), dir, version)
}

func (s *simTrainer) meanTraining() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var sum time.Duration
	for _, d := range s.trained {
		sum += d
	}
	return sum / time.Duration(max(1, len(s.trained)))
}

// episodeCounter counts the episodes started and finished.
type episodeCounter struct{ started, finished atomic.Int64 }

func (c *episodeCounter) StepStarted(int)              {}
func (c *episodeCounter) EpisodeStarted()              { c.started.Add(1) }
func (c *episodeCounter) inFlight() int64              { return c.started.Load() - c.finished.Load() }
func (c *episodeCounter) Trajectory(t core.Trajectory) { c.finished.Add(1) }

// hostUsage is the host's footprint: this process and its plugins.
type hostUsage struct {
	rssKiB, fds int
}

// procUsage reads a process's resident memory and open fds.
func procUsage(pid int) hostUsage {
	var u hostUsage
	// statm's second field is the resident set in pages.
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", pid)); err == nil {
		if f := strings.Fields(string(b)); len(f) > 1 {
			pages, _ := strconv.Atoi(f[1])
			u.rssKiB = pages * os.Getpagesize() / 1024
		}
	}
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		u.fds = len(ents)
	}
	return u
}

// children lists this process's child processes but skip.
func children(skip int) []int {
	ents, _ := os.ReadDir("/proc")
	self := os.Getpid()
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == skip {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after
		// its closing parenthesis.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(self) {
			out = append(out, pid)
		}
	}
	return out
}

// footprint is the host's: this process, and the plugin processes.
type footprint struct{ host, plugins hostUsage }

func measure(plugins []int) footprint {
	f := footprint{host: procUsage(os.Getpid())}
	for _, pid := range plugins {
		u := procUsage(pid)
		f.plugins.rssKiB += u.rssKiB
		f.plugins.fds += u.fds
	}
	return f
}

func (f footprint) total() hostUsage {
	return hostUsage{rssKiB: f.host.rssKiB + f.plugins.rssKiB, fds: f.host.fds + f.plugins.fds}
}

// idleWindow is how long the host's idle CPU use is measured.
const idleWindow = 5 * time.Second

// threadCPU is the CPU time of the calling thread.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// procCPU is the CPU time of this process and the plugins, read while
// they run.
func procCPU(plugins []int) time.Duration {
	self, _ := hostCPU()
	return self + pluginCPU(plugins)
}

// pluginCPU is the CPU time of the running plugins so far.
func pluginCPU(plugins []int) time.Duration {
	var sum time.Duration
	for _, pid := range plugins {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// utime and stime, in clock ticks, are the 12th and 13th fields
		// after the command's closing parenthesis.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 12 {
			u, _ := strconv.Atoi(f[11])
			st, _ := strconv.Atoi(f[12])
			sum += time.Duration(u+st) * time.Second / clockTicks
		}
	}
	return sum
}

// clockTicks is the kernel's USER_HZ, what /proc/PID/stat counts in.
const clockTicks = 100

// hostCPU is the CPU time of this process, and of its children waited
// for (the plugins, once stopped).
func hostCPU() (self, plugins time.Duration) {
	var s, kids syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &s)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	tv := func(t syscall.Timeval) time.Duration {
		return time.Duration(t.Sec)*time.Second + time.Duration(t.Usec)*time.Microsecond
	}
	return tv(s.Utime) + tv(s.Stime), tv(kids.Utime) + tv(kids.Stime)
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// modeResult is one mode's measurements.
type modeResult struct {
	k                        int
	episodes, turns, errors  int
	passed                   int
	wall                     time.Duration
	stepWall                 time.Duration
	rolloutMean, trainMean   time.Duration
	busyMean, busyMin        float64
	busyRollouts             float64 // mean, until the last rollout ended
	cpu, cpuSelf, cpuPlugins time.Duration
	idleCPU                  time.Duration // per second
	cpuPerTurn               time.Duration
	peakInFlight             int64
	rssPerEp, fdsPerEp       float64
	rssHostPerEp             float64
	rssPluginsPerEp          float64
	rssBase, rssPeak         int
	goroBefore, goroAfter    int
	fdsBefore, fdsAfter      int
	leaked                   int
	maxAge                   int
	served, tokens           int64
	warnings                 int
	loadBefore, loadAfter    string
}

const clusterJob = `
run {
  name                 = "sim"
  steps                = %d
  batch_size           = %d
  group_size           = %d
  seed                 = 1
  concurrency          = %d
  max_turns            = 12
  episode_timeout      = "30m"
  max_off_policy_steps = %d
}
sandbox "cloud" {
  backend      = "daytona"
  api_url      = %q
  api_key      = %q
  state_dir    = %q
  timeout      = "60s"
  create_rate  = 1000
  max_starting = 1000
}
env "mbpp" {
  plugin  = "mbpp"
  sandbox = sandbox.cloud
  dataset = %q
}
policy "fleet" {
  provider    = "vllm"
  base_urls   = %s
  model       = %q
  temperature = 1.0
  max_tokens  = 1024
}
output { dir = "out" }
`

// runMode runs one mode on a fresh cluster and measures the host.
func runMode(b *testing.B, bin string, s simScale, k int, trainFor func(*runner.Step) time.Duration, tr **simTrainer) modeResult {
	b.Helper()
	res := modeResult{k: k, loadBefore: loadAvg()}
	c := startCluster(b, bin, s)
	defer c.stop()
	dir := b.TempDir()
	urls, _ := json.Marshal(c.ep.VLLM)
	dataset, _ := filepath.Abs("../../../examples/mbpp/sample.jsonl")
	src := fmt.Sprintf(clusterJob, s.steps, s.batch(), s.group, s.concurrency, k,
		c.ep.Daytona.URL, c.ep.Daytona.APIKey, filepath.Join(dir, "state"), dataset, urls, c.ep.Model)
	path := filepath.Join(dir, "job.hcl")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		b.Fatal(err)
	}
	f, diags := config.Load(path, nil)
	if diags.HasErrors() {
		b.Fatal(diags)
	}
	ctx := context.Background()
	runtime.GC()
	res.goroBefore, res.fdsBefore = runtime.NumGoroutine(), procUsage(os.Getpid()).fds
	_, plugins0 := hostCPU() // the plugins' CPU time counts once they exit
	var logs strings.Builder
	var logMu sync.Mutex
	logger := hclog.New(&hclog.LoggerOptions{Name: "rlhost", Level: hclog.Warn, Output: lockedWriter{&logs, &logMu}})
	mgr, err := pluginmgr.New(pluginmgr.Options{Self: rlhostBin, Builtins: builtinNames(), Logger: logger})
	if err != nil {
		b.Fatal(err)
	}
	j, diags := job.Prepare(ctx, f, mgr, job.Options{RunID: fmt.Sprintf("sim-%d", k)})
	if diags.HasErrors() {
		mgr.StopAll(ctx)
		b.Fatal(diags)
	}
	vp, ok := j.Policy.(policy.Adapters)
	if !ok {
		b.Fatalf("policy %T is not a vllm policy", j.Policy)
	}
	out, err := output.Open(filepath.Join(dir, "out"))
	if err != nil {
		b.Fatal(err)
	}
	var count episodeCounter
	out.OnTrajectory(count.Trajectory)
	r := j.Runner(out)
	r.Logger, r.Observe = logger, &count
	var rolloutsEnd []fakevllm.Stats
	*tr = &simTrainer{policy: vp, dir: filepath.Join(dir, "adapters"), trainFor: trainFor,
		last: s.steps - 1, lastRollout: func() { rolloutsEnd = c.stats(b) }}
	r.Sinks = []runner.StepSink{*tr}
	// The plugins are this process's children but the cluster; reading
	// only their /proc entries keeps the sampling cheap.
	plugins := children(c.cmd.Process.Pid)
	base := measure(plugins)
	res.rssBase = base.total().rssKiB

	// What the host burns doing nothing, with its plugins started.
	idle0 := procCPU(plugins)
	time.Sleep(idleWindow)
	res.idleCPU = (procCPU(plugins) - idle0) / time.Duration(idleWindow/time.Second)

	// Sample the host's footprint while the run goes: the peaks, and how
	// many episodes were in flight then. The sampler's own CPU time is
	// taken off the host's.
	stopSampling := make(chan struct{})
	var sampled sync.WaitGroup
	var peak footprint
	var samplingCPU time.Duration
	sampled.Go(func() {
		// On its own thread, whose CPU clock is then the sampler's.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-t.C:
			}
			t0 := threadCPU()
			u := measure(plugins)
			peak.host.rssKiB, peak.host.fds = max(peak.host.rssKiB, u.host.rssKiB), max(peak.host.fds, u.host.fds)
			peak.plugins.rssKiB, peak.plugins.fds = max(peak.plugins.rssKiB, u.plugins.rssKiB), max(peak.plugins.fds, u.plugins.fds)
			res.peakInFlight = max(res.peakInFlight, count.inFlight())
			samplingCPU += threadCPU() - t0
		}
	})
	before := c.stats(b)
	self0, _ := hostCPU()
	started := pluginCPU(plugins) // their start-up and the idle window
	start := time.Now()
	_, err = r.Run(ctx)
	res.wall = time.Since(start)
	close(stopSampling)
	sampled.Wait()
	after := c.stats(b)
	if err != nil {
		b.Fatalf("run with max_off_policy_steps = %d: %v\n%s", k, err, logs.String())
	}
	out.Close()
	j.Close(ctx)
	mgr.StopAll(ctx)
	self1, plugins1 := hostCPU()
	res.cpuSelf, res.cpuPlugins = self1-self0-samplingCPU, plugins1-plugins0-started
	res.cpu = res.cpuSelf + res.cpuPlugins
	res.leaked = c.liveSandboxes(b)

	// What is left once the run is over: goroutines that end on their
	// own are given a few seconds to.
	http.DefaultClient.CloseIdleConnections()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		runtime.GC()
		if runtime.NumGoroutine() <= res.goroBefore && procUsage(os.Getpid()).fds <= res.fdsBefore {
			break
		}
	}
	res.goroAfter, res.fdsAfter = runtime.NumGoroutine(), procUsage(os.Getpid()).fds
	if res.goroAfter > res.goroBefore {
		buf := make([]byte, 1<<20)
		b.Logf("goroutines left after max_off_policy_steps = %d:\n%s", k, buf[:runtime.Stack(buf, true)])
	}

	res.rssPeak = peak.total().rssKiB
	if n := float64(res.peakInFlight); n > 0 {
		res.rssHostPerEp = float64(peak.host.rssKiB-base.host.rssKiB) / n
		res.rssPluginsPerEp = float64(peak.plugins.rssKiB-base.plugins.rssKiB) / n
		res.rssPerEp = res.rssHostPerEp + res.rssPluginsPerEp
		res.fdsPerEp = float64(peak.host.fds-base.host.fds+peak.plugins.fds-base.plugins.fds) / n
	}
	var busy []float64
	for i := range after {
		d := after[i].Sub(before[i])
		busy = append(busy, d.BusyFraction())
		if rolloutsEnd != nil {
			res.busyRollouts += rolloutsEnd[i].Sub(before[i]).BusyFraction() / float64(len(after))
		}
		res.served += d.Requests
		res.tokens += d.CompletionTokens
	}
	res.busyMin = slices.Min(busy)
	for _, v := range busy {
		res.busyMean += v / float64(len(busy))
	}
	res.stepWall = res.wall / time.Duration(s.steps)
	(*tr).mu.Lock()
	for _, d := range (*tr).rollout {
		res.rolloutMean += d / time.Duration(len((*tr).rollout))
	}
	(*tr).mu.Unlock()
	res.trainMean = (*tr).meanTraining()
	res.warnings = strings.Count(logs.String(), "[WARN]")
	if res.warnings > 0 {
		b.Logf("host warnings with max_off_policy_steps = %d:\n%s", k, logs.String())
	}
	readTurns(b, filepath.Join(dir, "out", output.TrajectoriesFile), &res)
	if res.turns > 0 {
		res.cpuPerTurn = res.cpu / time.Duration(res.turns)
	}
	res.loadAfter = loadAvg()
	return res
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// readTurns counts the episodes and turns written, the errors, and the
// oldest weights a trained step's turn was sampled with.
func readTurns(b *testing.B, path string, res *modeResult) {
	b.Helper()
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var t struct {
			Step   int     `json:"step"`
			Error  string  `json:"error"`
			Reward float64 `json:"reward"`
			Turns  []struct {
				WeightsVersion *int `json:"weights_version"`
			} `json:"turns"`
		}
		if err := json.Unmarshal(sc.Bytes(), &t); err != nil {
			b.Fatal(err)
		}
		res.episodes++
		res.turns += len(t.Turns)
		if t.Error != "" {
			res.errors++
			if res.errors <= 3 {
				b.Logf("episode error: %s", t.Error)
			}
		}
		if t.Reward > 0 {
			res.passed++
		}
		for _, tn := range t.Turns {
			v := 0
			if tn.WeightsVersion != nil {
				v = *tn.WeightsVersion
			}
			res.maxAge = max(res.maxAge, t.Step-v)
		}
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkCluster(b *testing.B) {
	s := clusterScale(b)
	bin := buildPlugin(b, "github.com/rlhost/rlhost/scripts/simcluster", "simcluster")
	for range b.N {
		var results []modeResult
		var syncTrain time.Duration
		for _, k := range s.modes {
			trainFor := func(st *runner.Step) time.Duration { return syncTrain }
			if k == 0 {
				// Training takes 40% of a synchronous step: 2/3 of the
				// step's rollout.
				trainFor = func(st *runner.Step) time.Duration { return st.Rollout * 2 / 3 }
			}
			var tr *simTrainer
			res := runMode(b, bin, s, k, trainFor, &tr)
			if k == 0 {
				syncTrain = tr.meanTraining()
			}
			results = append(results, res)
			b.Logf("max_off_policy_steps = %d: %+v", k, res)
		}
		clusterReport(b, s, results)
	}
}

// clusterReport writes the Markdown rows: one column per mode, the goals
// checked against the synchronous run.
func clusterReport(b *testing.B, s simScale, rs []modeResult) {
	b.Helper()
	sync0 := rs[0]
	var lines []string
	add := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
	add("Machine: %d CPUs; load average %s at the start of the synchronous run, %s at the end of the last", runtime.NumCPU(), sync0.loadBefore, rs[len(rs)-1].loadAfter)
	add("Note: per mode, %d episodes (%d steps of %d tasks x %d), %d at once; 4 simulated servers (%g tokens/s peak decode each); the same simulated training time in every async mode, %s per step, sized on the synchronous run", s.steps*s.batch()*s.group, s.steps, s.batch(), s.group, s.concurrency, s.peakDecode, rs[min(1, len(rs)-1)].trainMean.Round(time.Millisecond))
	head := "| | max_off_policy_steps = 0 (sync)"
	sep := "|---|---"
	for _, r := range rs[1:] {
		head += fmt.Sprintf(" | max_off_policy_steps = %d", r.k)
		sep += "|---"
	}
	add("%s | goal |", head)
	add("%s|---|", sep)
	row := func(name string, goal string, cell func(r modeResult) string) {
		l := "| " + name
		for _, r := range rs {
			l += " | " + cell(r)
		}
		add("%s | %s |", l, goal)
	}
	met := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**not met**"
	}
	row("episodes (errors) / turns", "", func(r modeResult) string {
		return fmt.Sprintf("%d (%d) / %d", r.episodes, r.errors, r.turns)
	})
	row("passed", "", func(r modeResult) string {
		return fmt.Sprintf("%.0f%%", 100*float64(r.passed)/float64(max(1, r.episodes)))
	})
	row("wall time per step (s)", "async <= 0.6x sync", func(r modeResult) string {
		ratio := r.stepWall.Seconds() / sync0.stepWall.Seconds()
		if r.k == 0 {
			return fmt.Sprintf("%.1f", r.stepWall.Seconds())
		}
		return fmt.Sprintf("%.1f (%.2fx, %s)", r.stepWall.Seconds(), ratio, met(ratio <= 0.6))
	})
	row("rollout / training per step (s)", "training 40% of a sync step", func(r modeResult) string {
		return fmt.Sprintf("%.1f / %.1f", r.rolloutMean.Seconds(), r.trainMean.Seconds())
	})
	row("servers busy (mean, least busy)", ">= 90% in async", func(r modeResult) string {
		cell := fmt.Sprintf("%.1f%%, %.1f%%", 100*r.busyMean, 100*r.busyMin)
		if r.k == 0 {
			return cell
		}
		return cell + ", " + met(r.busyMin >= 0.9)
	})
	row("servers busy until the last rollout ended (mean)", "", func(r modeResult) string {
		return fmt.Sprintf("%.1f%%", 100*r.busyRollouts)
	})
	row("host CPU per turn (ms)", "<= 1 ms", func(r modeResult) string {
		v := float64(r.cpuPerTurn.Microseconds()) / 1000
		return fmt.Sprintf("%.2f (%s)", v, met(v <= 1))
	})
	row("of which the host process / its plugins (ms)", "", func(r modeResult) string {
		t := time.Duration(max(1, r.turns))
		return fmt.Sprintf("%.2f / %.2f", float64((r.cpuSelf/t).Microseconds())/1000, float64((r.cpuPlugins/t).Microseconds())/1000)
	})
	row("host CPU while idle (ms per s)", "", func(r modeResult) string {
		return fmt.Sprintf("%.2f", float64(r.idleCPU.Microseconds())/1000)
	})
	row("host RSS per in-flight episode (KiB)", "<= 256 KiB", func(r modeResult) string {
		return fmt.Sprintf("%.0f (%s)", r.rssPerEp, met(r.rssPerEp <= 256))
	})
	row("of which the host process / its plugins (KiB)", "", func(r modeResult) string {
		return fmt.Sprintf("%.0f / %.0f", r.rssHostPerEp, r.rssPluginsPerEp)
	})
	row("host fds per in-flight episode", "", func(r modeResult) string { return fmt.Sprintf("%.2f", r.fdsPerEp) })
	row("episodes in flight at most", "", func(r modeResult) string { return fmt.Sprint(r.peakInFlight) })
	row("goroutines before / after", "no leak", func(r modeResult) string {
		return fmt.Sprintf("%d / %d (%s)", r.goroBefore, r.goroAfter, met(r.goroAfter <= r.goroBefore))
	})
	row("host fds before / after", "no leak", func(r modeResult) string {
		return fmt.Sprintf("%d / %d (%s)", r.fdsBefore, r.fdsAfter, met(r.fdsAfter <= r.fdsBefore))
	})
	row("sandboxes left", "0", func(r modeResult) string { return fmt.Sprintf("%d (%s)", r.leaked, met(r.leaked == 0)) })
	row("oldest weights trained on (steps)", "<= max_off_policy_steps", func(r modeResult) string {
		return fmt.Sprintf("%d (%s)", r.maxAge, met(r.maxAge <= r.k))
	})
	row("completions served / tokens generated", "", func(r modeResult) string { return fmt.Sprintf("%d / %d", r.served, r.tokens) })
	row("host warnings", "", func(r modeResult) string { return fmt.Sprint(r.warnings) })
	// One line of figures for BENCHMARKS.md's summary rows.
	sum := fmt.Sprintf("Summary: sync_step=%.1f cpu_turn_ms=%.2f rss_ep_kib=%.0f", sync0.stepWall.Seconds(),
		float64(sync0.cpuPerTurn.Microseconds())/1000, sync0.rssPerEp)
	for _, r := range rs[1:] {
		sum += fmt.Sprintf(" async%d_step=%.1f async%d_ratio=%.2f async%d_busy=%.1f", r.k, r.stepWall.Seconds(), r.k,
			r.stepWall.Seconds()/sync0.stepWall.Seconds(), r.k, 100*r.busyMean)
	}
	for _, l := range append(lines, sum) {
		fmt.Println(l)
	}
}
