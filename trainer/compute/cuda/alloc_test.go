//go:build cudaemu || (cuda && !cudastub)

package cuda_test

import (
	"testing"

	"github.com/rlhost/rlhost/trainer/hfconfig"
	"github.com/rlhost/rlhost/trainer/model"
)

// After the first training step has grown the scratch buffers, further
// steps allocate no device memory.
func TestStepsDoNotAllocate(t *testing.T) {
	be := newCUDA(t)
	cfg, err := hfconfig.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.New(be, cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.Init(1, 0.1)
	m.AllocGrads()
	const B, T = 2, 6
	run, err := m.NewRun(B, T)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int32, B*T)
	targets := make([]int32, B*T)
	for i := range ids {
		ids[i], targets[i] = int32(i%cfg.VocabSize), int32((i+1)%cfg.VocabSize)
	}
	logp, dlogp := make([]float32, B*T), make([]float32, B*T)
	for i := range dlogp {
		dlogp[i] = 0.1
	}
	step := func() {
		t.Helper()
		if err := run.Forward(ids, []int{T, 4}); err != nil {
			t.Fatal(err)
		}
		if err := run.LogProbs(targets, 1, logp); err != nil {
			t.Fatal(err)
		}
		m.ZeroGrads()
		if err := run.Backward(dlogp); err != nil {
			t.Fatal(err)
		}
		_ = m.GradNorm()
		if err := be.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	step()
	held := be.HeldBytes()
	for range 2 {
		step()
	}
	if be.HeldBytes() != held {
		t.Fatalf("device memory grew from %d to %d bytes over two more steps", held, be.HeldBytes())
	}
	if be.PeakBytes() < held || held == 0 {
		t.Fatalf("peak %d, held %d", be.PeakBytes(), held)
	}
}

// A scratch buffer that must grow frees the smaller one: device memory
// held is the largest need, not the sum of every size seen.
func TestScratchGrowthFreesOld(t *testing.T) {
	be := newCUDA(t)
	const B, hq, hkv, d, T = 1, 2, 1, 4, 8
	N := B * T
	q, k, v, dout := be.Alloc(N*hq*d), be.Alloc(N*hkv*d), be.Alloc(N*hkv*d), be.Alloc(N*hq*d)
	dq, dk, dv := be.Alloc(N*hq*d), be.Alloc(N*hkv*d), be.Alloc(N*hkv*d)
	att := be.Alloc(B * hq * T * T)
	lens := be.AllocInts(B)
	held := be.HeldBytes()
	for _, tt := range []int{4, 8, 4} {
		be.UploadInts(lens, []int32{int32(tt)})
		be.AttentionBackward(dq, dk, dv, dout, q, k, v, att, lens, B, tt, hq, hkv, d)
	}
	if err := be.Sync(); err != nil {
		t.Fatal(err)
	}
	if got, want := be.HeldBytes()-held, int64(4*B*hq*T*T); got != want {
		t.Fatalf("scratch holds %d bytes, want %d (the T=%d size only)", got, want, T)
	}
}
