package model

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestWithinMatchesFreshRun checks that a Run taken from a larger one
// computes exactly what a freshly allocated Run of that shape computes,
// even after the larger Run left other data in the shared memory.
func TestWithinMatchesFreshRun(t *testing.T) {
	be := newBackend64(t)
	cfg := tinyConfig(t, false, true)
	m := randomModel(t, be, cfg, 12)
	m.AllocGrads()
	big, err := m.NewRun(3, 10)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	fill := func(B, T int) ([]int32, []int, []int32, []float32) {
		ids, tgt, dlp := make([]int32, B*T), make([]int32, B*T), make([]float32, B*T)
		lens := make([]int, B)
		for b := range B {
			lens[b] = 1 + r.IntN(T)
		}
		for i := range ids {
			ids[i] = int32(r.IntN(cfg.VocabSize))
			tgt[i] = int32(r.IntN(cfg.VocabSize))
			dlp[i] = float32(r.NormFloat64())
		}
		return ids, lens, tgt, dlp
	}
	run := func(x *Run, ids []int32, lens []int, tgt []int32, dlp []float32) ([]float32, [][]float64) {
		m.ZeroGrads()
		lp := make([]float32, len(ids))
		if err := x.Forward(ids, lens); err != nil {
			t.Fatal(err)
		}
		if err := x.LogProbs(tgt, 0.9, lp); err != nil {
			t.Fatal(err)
		}
		if err := x.Backward(dlp); err != nil {
			t.Fatal(err)
		}
		var g [][]float64
		for _, p := range m.params {
			g = append(g, download(be, p.G))
		}
		return lp, g
	}
	bids, blens, btgt, bdlp := fill(3, 10)
	run(big, bids, blens, btgt, bdlp) // leaves its data in the shared memory
	sub, err := big.Within(2, 6)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := m.NewRun(2, 6)
	if err != nil {
		t.Fatal(err)
	}
	ids, lens, tgt, dlp := fill(2, 6)
	lpSub, gSub := run(sub, ids, lens, tgt, dlp)
	lpFresh, gFresh := run(fresh, ids, lens, tgt, dlp)
	for i := range lpSub {
		if math.Float32bits(lpSub[i]) != math.Float32bits(lpFresh[i]) {
			t.Fatalf("logp[%d]: within %g, fresh %g", i, lpSub[i], lpFresh[i])
		}
	}
	for k := range gSub {
		for i := range gSub[k] {
			if gSub[k][i] != gFresh[k][i] {
				t.Fatalf("%s grad[%d]: within %g, fresh %g", m.params[k].Name, i, gSub[k][i], gFresh[k][i])
			}
		}
	}
	if _, err := big.Within(4, 5); err == nil {
		t.Fatal("a larger batch than the run was accepted")
	}
}
