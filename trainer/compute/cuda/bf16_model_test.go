//go:build cudaemu || (cuda && !cudastub)

package cuda_test

import (
	"math"
	"testing"

	"github.com/rlhost/rlhost/trainer/compute"
)

// bf16CPU is the reference for BF16 mixed precision: the CPU backend with
// both operands of every MatMul rounded to BF16 (nearest, ties to even)
// before its FP32 product, which is what BF16 inputs with FP32
// accumulation compute up to summation order.
type bf16CPU struct{ compute.Device }

func (r bf16CPU) rounded(t compute.Tensor) compute.Tensor {
	v := make([]float32, t.Len())
	r.Download(v, t)
	for i, x := range v {
		v[i] = bf16Float(bf16Ref(x))
	}
	out := r.Alloc(len(v))
	r.Upload(out, v)
	return out
}

func (r bf16CPU) MatMul(c, a, b compute.Tensor, m, n, k int, transA, transB, acc bool) {
	r.Device.MatMul(c, r.rounded(a), r.rounded(b), m, n, k, transA, transB, acc)
}

// The tiny model's GRPO step with SetPrecision("bf16") on the device:
//
//   - against the rounded CPU reference, within modelTol: the two round
//     the same values, but those values already differ by FP32 summation
//     noise (~1e-6 relative), and a value that close to a BF16 rounding
//     boundary rounds the other way on one side, moving that operand by
//     one BF16 step (2^-8 relative). Such flips are rare (about noise/step
//     ≈ 1e-4 of elements) and each moves one term of a sum. The rounded
//     reference must also explain the device's log-probs and logits at
//     least 10× better than the FP32 step does.
//   - against the plain FP32 CPU step, within bf16FullTol: operands carry
//     2^-9 relative error each, which the two layers, the softmaxes and
//     the backward amplify to ~1e-2 of the largest magnitude. The two must
//     differ somewhere, or nothing was rounded.
const (
	bf16ModelTol = modelTol
	bf16FullTol  = 5e-2
)

func TestTinyModelBF16MatchesCPU(t *testing.T) {
	ref := grpoStep(t, bf16CPU{newCPU(t)})
	full := grpoStep(t, newCPU(t))
	dev := newCUDA(t)
	if err := dev.SetPrecision("bf16"); err != nil {
		t.Fatal(err)
	}
	if dev.Name() != "cuda-bf16" {
		t.Fatalf("name %q after SetPrecision(bf16)", dev.Name())
	}
	got := grpoStep(t, dev)
	for _, c := range []struct {
		what string
		ref  stepResult
		tol  float64
	}{{"bf16 cpu", ref, bf16ModelTol}, {"fp32 cpu", full, bf16FullTol}} {
		compare(t, c.what+": logp", c.ref.logp, got.logp, c.tol)
		for name, g := range c.ref.grads {
			compare(t, c.what+": grad "+name, g, got.grads[name], c.tol)
		}
		if d := math.Abs(c.ref.gradNorm - got.gradNorm); d > c.tol*c.ref.gradNorm {
			t.Errorf("%s: grad norm %g, cuda %g", c.what, c.ref.gradNorm, got.gradNorm)
		}
		for name, p := range c.ref.params {
			compare(t, c.what+": updated "+name, p, got.params[name], c.tol)
		}
		compare(t, c.what+": logp after update", c.ref.logp2, got.logp2, c.tol)
		compare(t, c.what+": generation logits", c.ref.genLogits, got.genLogits, c.tol)
	}
	// The rounded reference must explain the device's results far better
	// than the FP32 one, or it does not model what the device computes.
	for _, c := range []struct {
		what           string
		ref, full, got []float32
	}{
		{"logp", ref.logp, full.logp, got.logp},
		{"logp after update", ref.logp2, full.logp2, got.logp2},
		{"generation logits", ref.genLogits, full.genLogits, got.genLogits},
	} {
		er, ef := maxDiff(c.ref, c.got), maxDiff(c.full, c.got)
		t.Logf("%s: max diff to the bf16 reference %g, to fp32 %g", c.what, er, ef)
		if !(er*10 < ef) {
			t.Errorf("%s: max diff to the bf16 reference %g is not 10× below the diff to fp32 %g", c.what, er, ef)
		}
	}
	var moved float64
	for i := range full.logp {
		moved = max(moved, math.Abs(float64(full.logp[i]-got.logp[i])))
	}
	if moved < 1e-5 {
		t.Errorf("bf16 log-probs equal the fp32 ones (max diff %g): nothing was rounded", moved)
	}
	t.Logf("max |logp bf16 - fp32| = %g", moved)
}

func maxDiff(a, b []float32) float64 {
	var m float64
	for i := range a {
		m = max(m, math.Abs(float64(a[i])-float64(b[i])))
	}
	return m
}
