// Command bench measures the trainer's CPU backend and model and prints
// Markdown table rows for BENCHMARKS.md. Every figure comes with the
// yardsticks measured in the same run: the scalar multiply-add peak of a
// tight Go loop, single-thread and all-core sgemm with the best matmul,
// and, with --torch, the same Qwen2 shapes in PyTorch (torch_qwen2.py)
// and OpenBLAS's all-core sgemm through torch.mm.
//
// It deliberately checks no results (the tests do that) and by default
// skips the 0.5B-dimension runs, which need ~8 GB; pass --heavy for them.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/rlhost/rlhost/trainer/compute"
	"github.com/rlhost/rlhost/trainer/compute/cpu"
	"github.com/rlhost/rlhost/trainer/generate"
	"github.com/rlhost/rlhost/trainer/grpo"
	"github.com/rlhost/rlhost/trainer/hfconfig"
	"github.com/rlhost/rlhost/trainer/model"
)

func main() {
	heavy := flag.Bool("heavy", false, "also run the Qwen2.5-0.5B-dimension step and generation (~8 GB)")
	gemmN := flag.Int("gemm", 1024, "sgemm size for the yardstick (n×n×n)")
	seq := flag.Int("seq", 256, "sequence length for training steps")
	minTime := flag.Duration("min-time", 5*time.Second, "minimum timed duration per training measurement")
	genTokens := flag.Int("gen-tokens", 64, "tokens to generate per sequence in the generation runs")
	grpoPreset := flag.String("grpo", "", "only time one GRPO step (trainer/grpo) at this preset, with its peak RSS")
	python := flag.String("torch", "", "python with torch to run the PyTorch yardstick (torch_qwen2.py) with; empty skips it")
	script := flag.String("torch-script", "trainer/bench/torch_qwen2.py", "the PyTorch yardstick script")
	rounds := flag.Int("rounds", 3, "with --torch: alternating rlhost/PyTorch rounds per figure (medians are reported)")
	loraSpec := flag.String("lora", "", "with --grpo: train a LoRA adapter, RANK:MODULES (16:q,v or 16:all; alpha = 2×rank)")
	loraCompare := flag.String("lora-compare", "", "with --grpo: LoRA specs joined by + (16:q,v+16:all) to measure against full fine-tuning, each step in its own process")
	decodeOnly := flag.Bool("decode-only", false, "only the generation rows (and the sgemm they are measured against)")
	flag.Parse()
	if *grpoPreset != "" {
		fmt.Printf("Machine: %s, GOMAXPROCS=%d, %s/%s, %s\n", cpuName(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, runtime.Version())
		emit := func(r row) { fmt.Printf("| %s | %s | %s | %s |\n", r.name, r.value, r.baseline, r.ratio) }
		var err error
		switch {
		case *loraCompare != "":
			err = compareLoRA(*grpoPreset, *seq, strings.Split(*loraCompare, "+"), emit)
		case *loraSpec != "":
			var l *grpo.LoRA
			if l, err = parseLoRA(*loraSpec); err == nil {
				err = grpoStep(*grpoPreset, *seq, l, emit)
			}
		default:
			err = grpoStep(*grpoPreset, *seq, nil, emit)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	o := opts{heavy: *heavy, gemmN: *gemmN, seq: *seq, minTime: *minTime, genTokens: *genTokens,
		torch: torchRef{python: *python, script: *script, minTime: *minTime}, rounds: max(*rounds, 1), decodeOnly: *decodeOnly}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type row struct{ name, value, baseline, ratio string }

type opts struct {
	heavy      bool
	gemmN, seq int
	minTime    time.Duration
	genTokens  int
	torch      torchRef
	rounds     int
	decodeOnly bool
}

func run(o opts) error {
	heavy, gemmN, seq := o.heavy, o.gemmN, o.seq
	procs := runtime.GOMAXPROCS(0)
	fmt.Printf("Machine: %s, GOMAXPROCS=%d, %s/%s, %s\n", cpuName(), procs, runtime.GOOS, runtime.GOARCH, runtime.Version())
	fmt.Printf("Command: go run ./trainer/bench %s\n", strings.Join(os.Args[1:], " "))
	fmt.Printf("Note: load average at start %s\n", loadAvg())
	defer func() { fmt.Printf("Note: load average at end %s\n", loadAvg()) }()
	fmt.Println()
	fmt.Println("| benchmark | value | baseline (same run) | ratio |")
	fmt.Println("| --- | --- | --- | --- |")
	emit := func(r row) { fmt.Printf("| %s | %s | %s | %s |\n", r.name, r.value, r.baseline, r.ratio) }

	tr := o.torch
	if o.decodeOnly {
		return generation(o, "blocked", emit)
	}
	fma1 := peak(1, cpu.PeakScalarGFLOPS)
	fmaN := peak(procs, cpu.PeakScalarGFLOPS)
	emit(row{"scalar multiply-add loop (Go), 1 thread", gf(fma1), "-", "-"})
	emit(row{fmt.Sprintf("scalar multiply-add loop (Go), %d threads", procs), gf(fmaN), gf(fma1) + " (1 thread)", fmt.Sprintf("%.1fx", fmaN/fma1)})
	// The matmul kernel is 8-wide FMA (AVX2) where available: that loop is
	// the honest peak to compare sgemm against.
	if v1 := peak(1, cpu.PeakVectorGFLOPS); v1 > 0 {
		vN := peak(procs, cpu.PeakVectorGFLOPS)
		emit(row{"AVX2 FMA loop, 1 thread", gf(v1), gf(fma1) + " scalar", fmt.Sprintf("%.1fx", v1/fma1)})
		emit(row{fmt.Sprintf("AVX2 FMA loop, %d threads", procs), gf(vN), gf(v1) + " (1 thread)", fmt.Sprintf("%.1fx", vN/v1)})
		fma1, fmaN = v1, vN
	}

	best := map[int]float64{}
	for _, kind := range []string{"gonum", "blocked"} {
		for _, w := range []int{1, procs} {
			g, err := sgemm(kind, w, gemmN)
			if err != nil {
				return err
			}
			emit(row{fmt.Sprintf("sgemm %d³ %s, %d threads", gemmN, kind, w), gf(g), gf(fmaPick(w, fma1, fmaN)) + " FMA-loop peak", pct(g, fmaPick(w, fma1, fmaN))})
			best[w] = max(best[w], g)
		}
	}
	peakAll := best[procs]
	if tr.enabled() {
		r, err := tr.sgemm(gemmN)
		if err != nil {
			return err
		}
		emit(row{fmt.Sprintf("sgemm %d³ OpenBLAS (PyTorch torch.mm), %d threads", gemmN, r.Threads), gf(r.GFLOPS),
			gf(peakAll) + " rlhost best all-core sgemm", "rlhost " + pct(peakAll, r.GFLOPS)})
	}

	cases := []struct {
		preset string
		B      int
		adam   bool
	}{{"10m", 4, false}}
	if heavy {
		cases = append(cases, struct {
			preset string
			B      int
			adam   bool
		}{"qwen2.5-0.5b", 1, true})
	}
	bestKind := "blocked"
	if g1, _ := sgemm("gonum", procs, 256); g1 > peakAll {
		bestKind = "gonum"
	}
	for _, c := range cases {
		if tr.enabled() {
			if err := trainVsTorch(o, c.preset, c.B, c.adam, bestKind, emit); err != nil {
				return err
			}
			continue
		}
		// On a shared machine the load moves during a run: re-measure the
		// all-core sgemm right before and after each step and compare with
		// the better of the two (the more favourable yardstick).
		before, err := sgemm(bestKind, procs, gemmN)
		if err != nil {
			return err
		}
		res, err := step(c.preset, c.B, seq, c.adam, o.minTime)
		if err != nil {
			return err
		}
		after, err := sgemm(bestKind, procs, gemmN)
		if err != nil {
			return err
		}
		base := max(before, after, peakAll)
		emit(row{fmt.Sprintf("%s fwd+bwd, B=%d T=%d", c.preset, c.B, seq),
			fmt.Sprintf("%.0f tok/s, %.2f s/step, %s", res.tokS, res.stepS, gf(res.gflops)),
			fmt.Sprintf("%s all-core sgemm (best of %s before, %s after, %s at start)", gf(base), gf(before), gf(after), gf(peakAll)), pct(res.gflops, base)})
		if c.adam {
			emit(row{fmt.Sprintf("%s AdamW update (%d params)", c.preset, res.params), fmt.Sprintf("%.3f s", res.adamS), fmt.Sprintf("%.2f s fwd+bwd", res.stepS), pct(res.adamS, res.stepS)})
		}
		emit(row{fmt.Sprintf("%s peak RSS after step", c.preset), mib(vmHWM()), fmt.Sprintf("%s params f32", mib(int64(res.params)*4)), "-"})
	}
	return generation(o, bestKind, emit)
}

// generation emits the decoding rows: the 10m preset (and with --heavy
// the 0.5B one) at batch 1 and 16, against PyTorch and the sgemm-bound
// floor when --torch is given.
func generation(o opts, kind string, emit func(row)) error {
	gens := []string{"10m"}
	if o.heavy {
		gens = append(gens, "qwen2.5-0.5b")
	}
	for _, p := range gens {
		for _, B := range []int{1, 16} {
			if o.torch.enabled() {
				if err := decodeVsTorch(o, p, B, kind, emit); err != nil {
					return err
				}
				continue
			}
			tokS, _, err := gen(p, B, o.genTokens)
			if err != nil {
				return err
			}
			emit(row{fmt.Sprintf("%s generate, KV cache, batch %d, %d+%d tokens", p, B, genPrompt, o.genTokens), fmt.Sprintf("%.1f tok/s", tokS), "-", "-"})
		}
	}
	return nil
}

func fmaPick(w int, one, all float64) float64 {
	if w == 1 {
		return one
	}
	return all
}

func gf(v float64) string          { return fmt.Sprintf("%.1f GFLOP/s", v) }
func pct(a, b float64) string      { return fmt.Sprintf("%.0f%%", 100*a/b) }
func mib(bytes int64) string       { return fmt.Sprintf("%.0f MiB", float64(bytes)/(1<<20)) }
func secs(d time.Duration) float64 { return d.Seconds() }

// peak runs a peak loop on n goroutines at once and returns their summed
// GFLOP/s.
func peak(n int, loop func(int) (float64, float32)) float64 {
	var wg sync.WaitGroup
	res := make([]float64, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			loop(1e6) // warm up
			res[i], _ = loop(1e8)
		}()
	}
	wg.Wait()
	var s float64
	for _, v := range res {
		s += v
	}
	return s
}

func sgemm(kind string, workers, n int) (float64, error) {
	// gonum parallelises by itself over GOMAXPROCS; pin it for 1 thread.
	prev := runtime.GOMAXPROCS(max(workers, 1))
	defer runtime.GOMAXPROCS(prev)
	be, err := cpu.New(cpu.Options{Workers: workers, Matmul: kind})
	if err != nil {
		return 0, err
	}
	defer be.Close()
	a, b, c := be.Alloc(n*n), be.Alloc(n*n), be.Alloc(n*n)
	be.Fill(a, 0.5)
	be.Fill(b, 0.25)
	be.MatMul(c, a, b, n, n, n, false, true, false)
	iters := 0
	start := time.Now()
	for time.Since(start) < 2*time.Second || iters < 2 {
		be.MatMul(c, a, b, n, n, n, false, true, false)
		iters++
	}
	return 2 * float64(n) * float64(n) * float64(n) * float64(iters) / secs(time.Since(start)) / 1e9, nil
}

type stepResult struct {
	tokS, stepS, gflops, adamS float64
	params                     int
}

func step(preset string, B, T int, adam bool, minTime time.Duration) (stepResult, error) {
	cfg, err := hfconfig.Preset(preset)
	if err != nil {
		return stepResult{}, err
	}
	be, err := cpu.New(cpu.Options{})
	if err != nil {
		return stepResult{}, err
	}
	defer be.Close()
	m, err := model.New(be, cfg)
	if err != nil {
		return stepResult{}, err
	}
	m.Init(1, 0.02)
	m.AllocGrads()
	r, err := m.NewRun(B, T)
	if err != nil {
		return stepResult{}, err
	}
	ids, tg, lens := make([]int32, B*T), make([]int32, B*T), make([]int, B)
	for i := range ids {
		ids[i] = int32((i * 7919) % cfg.VocabSize)
		tg[i] = int32((i*7919 + 7919) % cfg.VocabSize)
	}
	for i := range lens {
		lens[i] = T
	}
	lp, dlp := make([]float32, B*T), make([]float32, B*T)
	for i := range dlp {
		dlp[i] = 1 / float32(B*T)
	}
	once := func() error {
		if err := r.Forward(ids, lens); err != nil {
			return err
		}
		if err := r.LogProbs(tg, 1, lp); err != nil {
			return err
		}
		m.ZeroGrads()
		return r.Backward(dlp)
	}
	if err := once(); err != nil { // warm-up: scratch buffers, page faults
		return stepResult{}, err
	}
	iters := 0
	start := time.Now()
	for time.Since(start) < minTime || iters < 1 {
		if err := once(); err != nil {
			return stepResult{}, err
		}
		iters++
	}
	st := secs(time.Since(start)) / float64(iters)
	res := stepResult{tokS: float64(B*T) / st, stepS: st, gflops: 3 * m.FlopsPerToken(T) * float64(B*T) / st / 1e9, params: cfg.NumParams()}
	if adam {
		var mom, vel []compute.Tensor
		for _, p := range m.Params() {
			mom, vel = append(mom, be.Alloc(p.Len())), append(vel, be.Alloc(p.Len()))
		}
		update := func(step int) {
			for i, p := range m.Params() {
				be.AdamW(p.W, p.G, mom[i], vel[i], compute.AdamWParams{LR: 1e-5, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, Step: step})
			}
		}
		update(1) // the first touch of the moment buffers page-faults them in
		t0 := time.Now()
		update(2)
		res.adamS = secs(time.Since(t0))
	}
	return res, nil
}

// genPrompt is the prompt length of the generation runs (as torch_qwen2.py's).
const genPrompt = 32

// gen times trainer/generate on B prompts of genPrompt tokens, each
// continued by tokens sampled tokens, and returns the generated tokens per
// second and the linear layers' GFLOP per generated token.
func gen(preset string, B, tokens int) (tokS, gflopPerTok float64, err error) {
	cfg, err := hfconfig.Preset(preset)
	if err != nil {
		return 0, 0, err
	}
	be, err := cpu.New(cpu.Options{})
	if err != nil {
		return 0, 0, err
	}
	defer be.Close()
	m, err := model.New(be, cfg)
	if err != nil {
		return 0, 0, err
	}
	m.Init(1, 0.02)
	prompts := make([][]int, B)
	for b := range prompts {
		for i := range genPrompt {
			prompts[b] = append(prompts[b], (b*131+i*17)%cfg.VocabSize)
		}
	}
	o := generate.Options{MaxTokens: tokens, Temperature: 1, Seed: 1} // no stop ids: always all tokens
	start := time.Now()
	res, err := generate.Generate(context.Background(), m, prompts, o)
	if err != nil {
		return 0, 0, err
	}
	n := 0
	for _, r := range res {
		n += len(r.Tokens)
	}
	return float64(n) / secs(time.Since(start)), genFlops(m, B, genPrompt, tokens) / float64(n) / 1e9, nil
}

// genFlops is the linear layers' work (2 flops per multiply-add) of
// generating tokens tokens for each of B prompts of p tokens: the prefill
// computes every layer for every prompt row but the output layer only for
// each prompt's last row, then tokens-1 decode steps run one row per
// sequence. Attention is left out (under 1% at these lengths); this is the
// work an sgemm-bound floor divides.
func genFlops(m *model.Model, B, p, tokens int) float64 {
	c := m.Cfg
	head := 2 * float64(c.HiddenSize) * float64(c.VocabSize)
	row := m.FlopsPerToken(0)
	return float64(B) * (float64(p)*(row-head) + head + float64(tokens-1)*row)
}

// loadAvg is /proc/loadavg's 1, 5 and 15 minute figures, with the core
// count: the machine is shared, and the ratios matter more than the times.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return fmt.Sprintf("%s %s %s on %d cores", f[0], f[1], f[2], runtime.NumCPU())
}

func cpuName() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "model name") {
			if _, v, ok := strings.Cut(l, ":"); ok {
				return strings.TrimSpace(v)
			}
		}
	}
	return "unknown CPU"
}

// vmHWM is the process's peak resident set (Linux), or runtime's Sys.
func vmHWM() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "VmHWM:") {
				var kb int64
				if _, err := fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(l, "VmHWM:")), "%d kB", &kb); err == nil {
					return kb << 10
				}
			}
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.Sys)
}
