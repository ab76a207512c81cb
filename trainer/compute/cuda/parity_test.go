//go:build cudaemu || (cuda && !cudastub)

package cuda_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/rlhost/rlhost/trainer/compute"
	"github.com/rlhost/rlhost/trainer/compute/cpu"
)

// Tolerances. Both backends compute in float32 but sum in different
// orders (tree reductions in blocks, cuBLAS's split-K, per-column
// loops), so results differ by a few ulps times √(terms summed). With at
// most a few hundred terms per sum that is ~1e-6 relative to the largest
// magnitude; opTol leaves a factor of ~50. A whole model stacks two
// layers, a 64-way softmax and a backward through all of it; modelTol
// allows for that amplification. A real bug (wrong index, missing mask,
// wrong sign) shows up as an error of order 1.
const (
	opTol    = 5e-5
	modelTol = 1e-3
)

type output struct {
	name string
	t    compute.Tensor
}

// opCase builds inputs with r (same seed on both backends), runs one op
// and returns the tensors to compare.
type opCase struct {
	name string
	run  func(be compute.Device, r *rand.Rand) []output
}

func randT(be compute.Device, r *rand.Rand, n int, scale float32) compute.Tensor {
	v := make([]float32, n)
	for i := range v {
		v[i] = (r.Float32()*2 - 1) * scale
	}
	t := be.Alloc(n)
	be.Upload(t, v)
	return t
}

func intsT(be compute.Device, v ...int32) compute.Ints {
	t := be.AllocInts(len(v))
	be.UploadInts(t, v)
	return t
}

func download(be compute.Device, t compute.Tensor) []float32 {
	v := make([]float32, t.Len())
	be.Download(v, t)
	return v
}

// compare fails when max|a−b| exceeds tol·max|ref|, and when ref is all
// zeros (a case that cannot tell a broken kernel from a working one).
func compare(t *testing.T, what string, ref, got []float32, tol float64) {
	t.Helper()
	if len(ref) != len(got) {
		t.Fatalf("%s: %d vs %d elements", what, len(ref), len(got))
	}
	var scale, worst float64
	at := -1
	for i := range ref {
		scale = max(scale, math.Abs(float64(ref[i])))
		if d := math.Abs(float64(ref[i]) - float64(got[i])); d > worst || math.IsNaN(d) {
			worst, at = d, i
			if math.IsNaN(d) {
				worst = math.Inf(1)
			}
		}
	}
	if scale == 0 {
		t.Fatalf("%s: reference is all zeros; the case checks nothing", what)
	}
	if worst > tol*scale {
		t.Errorf("%s: max error %.3g at %d (cpu %g, cuda %g), allowed %.3g (scale %.3g)",
			what, worst, at, ref[at], got[at], tol*scale, scale)
	}
}

func opCases() []opCase {
	const d = 8
	return []opCase{
		{"fill+add+accumulate+scale+copy", func(be compute.Device, r *rand.Rand) []output {
			n := 1000
			a, c := randT(be, r, n, 1), randT(be, r, n, 1)
			out, acc, cp, f := be.Alloc(n), randT(be, r, n, 1), be.Alloc(n), be.Alloc(n)
			be.Add(out, a, c)
			be.Accumulate(acc, out)
			be.Scale(acc, -0.5)
			be.Copy(cp, acc)
			be.Fill(f, 3)
			z := randT(be, r, n, 1)
			be.Zero(z)
			be.Accumulate(z, f)
			return []output{{"add", out}, {"acc", acc}, {"copy", cp}, {"fill+zero", z}}
		}},
		{"sumsquares", func(be compute.Device, r *rand.Rand) []output {
			x := randT(be, r, 100003, 1)
			s := be.Alloc(1)
			be.Upload(s, []float32{float32(be.SumSquares(x))})
			return []output{{"sum", s}}
		}},
		{"matmul", func(be compute.Device, r *rand.Rand) []output {
			var outs []output
			for _, tc := range []struct{ ta, tb, acc bool }{{false, false, false}, {false, true, true}, {true, false, true}, {true, true, false}} {
				m, n, k := 13, 9, 21
				a, b := randT(be, r, m*k, 1), randT(be, r, k*n, 1)
				c := randT(be, r, m*n, 1)
				be.MatMul(c, a, b, m, n, k, tc.ta, tc.tb, tc.acc)
				outs = append(outs, output{fmt.Sprintf("tA=%v tB=%v acc=%v", tc.ta, tc.tb, tc.acc), c})
			}
			return outs
		}},
		{"bias", func(be compute.Device, r *rand.Rand) []output {
			rows, cols := 37, 300
			x, bias, db := randT(be, r, rows*cols, 1), randT(be, r, cols, 1), randT(be, r, cols, 1)
			be.AddBias(x, bias, rows, cols)
			be.BiasBackward(db, x, rows, cols)
			return []output{{"x", x}, {"dbias", db}}
		}},
		{"rmsnorm", func(be compute.Device, r *rand.Rand) []output {
			rows, dim := 5, 300
			x, w := randT(be, r, rows*dim, 2), randT(be, r, dim, 1)
			out, rstd := be.Alloc(rows*dim), be.Alloc(rows)
			be.RMSNorm(out, rstd, x, w, rows, dim, 1e-6)
			dout := randT(be, r, rows*dim, 1)
			dx, dw := randT(be, r, rows*dim, 1), randT(be, r, dim, 1)
			be.RMSNormBackward(dx, dw, dout, x, w, rstd, rows, dim)
			return []output{{"out", out}, {"rstd", rstd}, {"dx", dx}, {"dw", dw}}
		}},
		{"rope", func(be compute.Device, r *rand.Rand) []output {
			rows, heads, hd := 6, 3, 16
			x := randT(be, r, rows*heads*hd, 1)
			pos := intsT(be, 0, 1, 5, 17, 300, 4095)
			be.RoPE(x, pos, rows, heads, hd, 1e6)
			y := be.Alloc(x.Len())
			be.Copy(y, x)
			be.RoPEBackward(y, pos, rows, heads, hd, 10000)
			return []output{{"fwd", x}, {"bwd", y}}
		}},
		{"attention d=8", func(be compute.Device, r *rand.Rand) []output { return attention(be, r, d) }},
		// d=12 does not divide the block, so the kernels take their
		// one-group path.
		{"attention d=12", func(be compute.Device, r *rand.Rand) []output { return attention(be, r, 12) }},
		// Head dims past the tiled kernel's limit take the per-row kernel.
		{"attention d=130", func(be compute.Device, r *rand.Rand) []output { return attention(be, r, 130) }},
		// More keys than threads per block: the strided loops.
		{"attention T=300", func(be compute.Device, r *rand.Rand) []output { return attentionT(be, r, d, 300, []int32{290}) }},
		{"cached attention d=8", func(be compute.Device, r *rand.Rand) []output { return cachedAttention(be, r, d) }},
		{"cached attention d=12", func(be compute.Device, r *rand.Rand) []output { return cachedAttention(be, r, 12) }},
		{"swiglu", func(be compute.Device, r *rand.Rand) []output {
			n := 777
			g, u := randT(be, r, n, 6), randT(be, r, n, 2)
			out := be.Alloc(n)
			be.SwiGLU(out, g, u, n)
			dout, dg, du := randT(be, r, n, 1), randT(be, r, n, 1), randT(be, r, n, 1)
			be.SwiGLUBackward(dg, du, dout, g, u, n)
			return []output{{"out", out}, {"dgate", dg}, {"dup", du}}
		}},
		{"embed", func(be compute.Device, r *rand.Rand) []output {
			V, dim := 11, 40
			table, dtable := randT(be, r, V*dim, 1), randT(be, r, V*dim, 1)
			ids := intsT(be, 3, 0, 10, 3, 3, 7)
			out := be.Alloc(6 * dim)
			be.Embed(out, table, ids, 6, dim)
			dout := randT(be, r, 6*dim, 1)
			be.EmbedBackward(dtable, dout, ids, 6, dim)
			return []output{{"out", out}, {"dtable", dtable}}
		}},
		{"logprobs", func(be compute.Device, r *rand.Rand) []output {
			rows, V := 5, 1000
			logits := randT(be, r, rows*V, 8)
			tg := intsT(be, 3, -1, 999, 0, 500)
			logp, lse := be.Alloc(rows), be.Alloc(rows)
			be.LogProbs(logp, lse, logits, tg, rows, V, 1/0.7)
			dlogp := be.Alloc(rows)
			be.Upload(dlogp, []float32{1, 2, -0.5, 0, 3})
			dz := be.Alloc(rows * V)
			be.LogProbsBackward(dz, dlogp, logits, lse, tg, rows, V, 1/0.7)
			// In place, as the model calls it.
			be.LogProbsBackward(logits, dlogp, logits, lse, tg, rows, V, 1/0.7)
			return []output{{"logp", logp}, {"lse", lse}, {"dlogits", dz}, {"in place", logits}}
		}},
		{"adamw", func(be compute.Device, r *rand.Rand) []output {
			n := 5000
			p, m, v := randT(be, r, n, 1), randT(be, r, n, 0.1), be.Alloc(n)
			for step := 1; step <= 3; step++ {
				g := randT(be, r, n, 1)
				be.AdamW(p, g, m, v, compute.AdamWParams{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1, Step: step})
			}
			return []output{{"param", p}, {"m", m}, {"v", v}}
		}},
	}
}

func attention(be compute.Device, r *rand.Rand, d int) []output {
	return attentionT(be, r, d, 7, []int32{7, 4})
}

// attentionT runs attention forward and backward over len(lens)
// sequences padded to T.
func attentionT(be compute.Device, r *rand.Rand, d, T int, lens []int32) []output {
	const hq, hkv = 4, 2
	B := len(lens)
	N := B * T
	q, k, v := randT(be, r, N*hq*d, 1), randT(be, r, N*hkv*d, 1), randT(be, r, N*hkv*d, 1)
	out, att := randT(be, r, N*hq*d, 1), randT(be, r, B*hq*T*T, 1)
	l := intsT(be, lens...)
	be.Attention(out, att, q, k, v, l, B, T, hq, hkv, d)
	dout := randT(be, r, N*hq*d, 1)
	dq, dk, dv := randT(be, r, N*hq*d, 1), randT(be, r, N*hkv*d, 1), randT(be, r, N*hkv*d, 1)
	be.AttentionBackward(dq, dk, dv, dout, q, k, v, att, l, B, T, hq, hkv, d)
	return []output{{"out", out}, {"att", att}, {"dq", dq}, {"dk", dk}, {"dv", dv}}
}

func cachedAttention(be compute.Device, r *rand.Rand, d int) []output {
	const B, hq, hkv, maxT, tq = 2, 4, 2, 9, 2
	kc, vc := randT(be, r, B*maxT*hkv*d, 1), randT(be, r, B*maxT*hkv*d, 1)
	xk := randT(be, r, B*tq*hkv*d, 1)
	start := intsT(be, 3, 7)
	be.WriteCache(kc, xk, start, B, tq, maxT, hkv*d)
	q := randT(be, r, B*tq*hq*d, 1)
	out := randT(be, r, B*tq*hq*d, 1)
	be.AttentionCached(out, q, kc, vc, start, B, tq, maxT, hq, hkv, d)
	return []output{{"cache", kc}, {"out", out}}
}

func newCPU(t *testing.T) compute.Device {
	t.Helper()
	b, err := cpu.New(cpu.Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

func TestOpsMatchCPU(t *testing.T) {
	for i, c := range opCases() {
		t.Run(c.name, func(t *testing.T) {
			ref, gpu := newCPU(t), newCUDA(t)
			ro := c.run(ref, rand.New(rand.NewPCG(uint64(i), 1)))
			go_ := c.run(gpu, rand.New(rand.NewPCG(uint64(i), 1)))
			if err := gpu.Sync(); err != nil {
				t.Fatal(err)
			}
			for j := range ro {
				compare(t, ro[j].name, download(ref, ro[j].t), download(gpu, go_[j].t), opTol)
			}
		})
	}
}
