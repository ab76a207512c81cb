//go:build cudaemu || (cuda && !cudastub)

package cuda_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/rlhost/rlhost/trainer/compute"
)

// flashShape runs attention forward and backward on identical inputs:
// the CPU's Attention/AttentionBackward (with probabilities), or, when
// flash is set, the device's AttentionLSE/AttentionLSEBackward.
func flashShape(be compute.Device, flash compute.LSEAttention, r *rand.Rand, B, T, hq, hkv, d int, lens []int32) []output {
	N := B * T
	q, k, v := randT(be, r, N*hq*d, 1), randT(be, r, N*hkv*d, 1), randT(be, r, N*hkv*d, 1)
	out, dout := randT(be, r, N*hq*d, 1), randT(be, r, N*hq*d, 1)
	dq, dk, dv := randT(be, r, N*hq*d, 1), randT(be, r, N*hkv*d, 1), randT(be, r, N*hkv*d, 1)
	l := intsT(be, lens...)
	if flash != nil {
		lse := be.Alloc(B * hq * T)
		flash.AttentionLSE(out, lse, q, k, v, l, B, T, hq, hkv, d)
		flash.AttentionLSEBackward(dq, dk, dv, dout, out, q, k, v, lse, l, B, T, hq, hkv, d)
	} else {
		att := be.Alloc(B * hq * T * T)
		be.Attention(out, att, q, k, v, l, B, T, hq, hkv, d)
		be.AttentionBackward(dq, dk, dv, dout, q, k, v, att, l, B, T, hq, hkv, d)
	}
	return []output{{"out", out}, {"dq", dq}, {"dk", dk}, {"dv", dv}}
}

// The flash-style kernels (row log-sum-exps, probabilities recomputed in
// the backward) against the CPU backend's attention: random shapes as in
// TestAttentionRandomShapesMatchCPU, plus sequences longer than a block
// (T > 256, so keys and queries come in several chunks) with a head dim
// that divides the block (d = 64) and one that does not (d = 6).
func TestFlashAttentionMatchesCPU(t *testing.T) {
	type shape struct {
		B, T, hq, hkv, d int
		lens             []int32
	}
	var shapes []shape
	r := rand.New(rand.NewPCG(43, 0))
	for c := range 6 {
		B, T := 1+r.IntN(3), 1+r.IntN(40)
		hkv, grp := 1+r.IntN(2), 1+r.IntN(3)
		d := []int{2, 4, 6, 8, 16, 20}[r.IntN(6)]
		lens := make([]int32, B)
		for i := range lens {
			lens[i] = int32(r.IntN(T + 1))
		}
		lens[0] = int32(T)
		if B > 1 && c%2 == 0 {
			lens[B-1] = 0
		}
		shapes = append(shapes, shape{B, T, hkv * grp, hkv, d, lens})
	}
	shapes = append(shapes, shape{1, 300, 2, 1, 64, []int32{290}}, shape{2, 270, 2, 2, 6, []int32{270, 100}})
	for c, s := range shapes {
		t.Run(fmt.Sprintf("B=%d T=%d hq=%d hkv=%d d=%d lens=%v", s.B, s.T, s.hq, s.hkv, s.d, s.lens), func(t *testing.T) {
			ref, dev := newCPU(t), newCUDA(t)
			ro := flashShape(ref, nil, rand.New(rand.NewPCG(uint64(c), 9)), s.B, s.T, s.hq, s.hkv, s.d, s.lens)
			got := flashShape(dev, dev, rand.New(rand.NewPCG(uint64(c), 9)), s.B, s.T, s.hq, s.hkv, s.d, s.lens)
			if err := dev.Sync(); err != nil {
				t.Fatal(err)
			}
			for j := range ro {
				compare(t, ro[j].name, download(ref, ro[j].t), download(dev, got[j].t), opTol)
			}
		})
	}
}

// The tiny model's GRPO step with flash attention on the device, against
// the CPU (which keeps probabilities): same tolerance as the default path.
func TestTinyModelFlashAttentionMatchesCPU(t *testing.T) {
	ref := grpoStep(t, newCPU(t))
	dev := newCUDA(t)
	dev.SetFlashAttention(true)
	got := grpoStep(t, dev)
	compare(t, "logp", ref.logp, got.logp, modelTol)
	for name, g := range ref.grads {
		compare(t, "grad "+name, g, got.grads[name], modelTol)
	}
	if d := math.Abs(ref.gradNorm - got.gradNorm); d > modelTol*ref.gradNorm {
		t.Errorf("grad norm: cpu %g, cuda %g", ref.gradNorm, got.gradNorm)
	}
	compare(t, "logp after update", ref.logp2, got.logp2, modelTol)
}

// Under flash attention a training run holds row log-sum-exps instead of
// the probabilities: NewRun allocates L·B·hq·(T²−T) fewer floats.
func TestFlashAttentionSavesMemory(t *testing.T) {
	const B, T = 2, 64
	held := func(flash bool) int64 {
		dev := newCUDA(t)
		dev.SetFlashAttention(flash)
		m := tinyModel(t, dev)
		m.AllocGrads()
		if _, err := m.NewRun(B, T); err != nil {
			t.Fatal(err)
		}
		return dev.HeldBytes()
	}
	cfg := tinyModel(t, newCPU(t)).Cfg
	want := int64(4 * cfg.NumLayers * B * cfg.NumHeads * (T*T - T))
	if got := held(false) - held(true); got != want {
		t.Fatalf("flash attention saves %d bytes, want %d", got, want)
	}
}
