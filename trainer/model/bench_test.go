package model

import (
	"os"
	"testing"

	"github.com/rlhost/rlhost/trainer/compute"
	"github.com/rlhost/rlhost/trainer/compute/cpu"
	"github.com/rlhost/rlhost/trainer/hfconfig"
)

// benchStep times forward + logprobs + backward (and AdamW when adam) of
// preset at B×T, reporting tokens/s and achieved matmul GFLOP/s.
func benchStep(b *testing.B, preset string, B, T int, adam bool) {
	cfg, err := hfconfig.Preset(preset)
	if err != nil {
		b.Fatal(err)
	}
	be, err := cpu.New(cpu.Options{Matmul: os.Getenv("RLHOST_MATMUL")})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	m, err := New(be, cfg)
	if err != nil {
		b.Fatal(err)
	}
	m.Init(1, 0.02)
	m.AllocGrads()
	var mom, vel []compute.Tensor
	if adam {
		for _, p := range m.Params() {
			mom, vel = append(mom, be.Alloc(p.Len())), append(vel, be.Alloc(p.Len()))
		}
	}
	r, err := m.NewRun(B, T)
	if err != nil {
		b.Fatal(err)
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
	step := 0
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := r.Forward(ids, lens); err != nil {
			b.Fatal(err)
		}
		if err := r.LogProbs(tg, 1, lp); err != nil {
			b.Fatal(err)
		}
		m.ZeroGrads()
		if err := r.Backward(dlp); err != nil {
			b.Fatal(err)
		}
		if adam {
			step++
			for i, p := range m.Params() {
				be.AdamW(p.W, p.G, mom[i], vel[i], compute.AdamWParams{LR: 1e-5, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, Step: step})
			}
		}
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(float64(B*T)/sec, "tokens/s")
	b.ReportMetric(3*m.FlopsPerToken(T)*float64(B*T)/sec/1e9, "GFLOP/s")
}

// BenchmarkTrainStepTiny shows the steady-state allocations of a step
// (allocs/op) on the tiny preset, where it runs in milliseconds.
func BenchmarkTrainStepTiny(b *testing.B) { benchStep(b, "tiny", 2, 32, true) }

// BenchmarkTrainStep10M is forward+backward of the ~10M-parameter preset.
func BenchmarkTrainStep10M(b *testing.B) { benchStep(b, "10m", 4, 256, false) }

// BenchmarkTrainStepQwen05B is one step at Qwen2.5-0.5B's dimensions with
// random weights, sequence 256. It needs ~4 GB (8 GB with AdamW), so it
// runs only with RLHOST_BENCH_HEAVY=1.
func BenchmarkTrainStepQwen05B(b *testing.B) {
	if os.Getenv("RLHOST_BENCH_HEAVY") != "1" {
		b.Skip("set RLHOST_BENCH_HEAVY=1 to run the 0.5B benchmark (needs ~8 GB)")
	}
	b.Run("fwd+bwd", func(b *testing.B) { benchStep(b, "qwen2.5-0.5b", 1, 256, false) })
	b.Run("fwd+bwd+adamw", func(b *testing.B) { benchStep(b, "qwen2.5-0.5b", 1, 256, true) })
}

// BenchmarkDecode10M is KV-cached decoding of 8 sequences (tokens/s).
func BenchmarkDecode10M(b *testing.B) {
	cfg, _ := hfconfig.Preset("10m")
	be, err := cpu.New(cpu.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	m, _ := New(be, cfg)
	m.Init(1, 0.02)
	const B, prompt, gen = 8, 32, 64
	c, err := m.NewCache(B, prompt+gen)
	if err != nil {
		b.Fatal(err)
	}
	lg := make([]float32, B*cfg.VocabSize)
	ids := make([]int32, prompt)
	next := make([]int32, B)
	b.ResetTimer()
	for b.Loop() {
		c.Reset()
		for s := range B {
			if err := c.Prefill(s, ids, lg[:cfg.VocabSize]); err != nil {
				b.Fatal(err)
			}
		}
		for range gen {
			if err := c.Decode(next, lg); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(B*gen*b.N)/b.Elapsed().Seconds(), "gen-tokens/s")
}
