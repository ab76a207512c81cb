package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/rlhost/rlhost/trainer/compute"
)

// Gradient checks run on the float64 instantiation of the same generic
// code, so central differences with h=1e-5 have truncation error O(h²)
// ≈ 1e-10 and rounding error ≈ 1e-16/h ≈ 1e-11, and a relative tolerance of
// 1e-6 separates a correct backward from a wrong one by many orders.
const (
	fdStep = 1e-5
	fdTol  = 1e-6
)

func newB64(t *testing.T, workers int) *Device[float64] {
	t.Helper()
	b, err := New64(Options{Workers: workers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

func randVec(r *rand.Rand, n int, scale float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = (r.Float64()*2 - 1) * scale
	}
	return v
}

func up(b *Device[float64], v []float64) compute.Tensor {
	t := b.Alloc(len(v))
	b.Upload64(t, v)
	return t
}

func down(b *Device[float64], t compute.Tensor) []float64 {
	v := make([]float64, t.Len())
	b.Download64(v, t)
	return v
}

func upInts(b *Device[float64], v []int32) compute.Ints {
	t := b.AllocInts(len(v))
	b.UploadInts(t, v)
	return t
}

// gradCheck compares analytic gradients against central differences of the
// scalar L = Σ w·f(x). fwd maps inputs to the output; bwd returns dL/dinput
// for each input given dL/dout = w (it must start from zeroed gradients).
func gradCheck(t *testing.T, name string, inputs [][]float64, fwd func([][]float64) []float64, bwd func([][]float64, []float64) [][]float64) {
	t.Helper()
	r := rand.New(rand.NewPCG(7, 7))
	out := fwd(inputs)
	w := randVec(r, len(out), 1)
	loss := func() float64 {
		var s float64
		for i, v := range fwd(inputs) {
			s += w[i] * v
		}
		return s
	}
	grads := bwd(inputs, w)
	for k, in := range inputs {
		if grads[k] == nil {
			continue
		}
		for i := range in {
			orig := in[i]
			in[i] = orig + fdStep
			lp := loss()
			in[i] = orig - fdStep
			lm := loss()
			in[i] = orig
			num := (lp - lm) / (2 * fdStep)
			got := grads[k][i]
			if math.Abs(num-got) > fdTol*math.Max(1, math.Abs(num)) {
				t.Fatalf("%s: d/dinput%d[%d] analytic %.10g numeric %.10g", name, k, i, got, num)
			}
		}
	}
}

func naiveMatMul(a, b []float64, m, n, k int, ta, tb bool) []float64 {
	c := make([]float64, m*n)
	for i := range m {
		for j := range n {
			var s float64
			for p := range k {
				av := a[i*k+p]
				if ta {
					av = a[p*m+i]
				}
				bv := b[p*n+j]
				if tb {
					bv = b[j*k+p]
				}
				s += av * bv
			}
			c[i*n+j] = s
		}
	}
	return c
}

func TestMatMulAgainstNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	shapes := [][3]int{{1, 1, 1}, {5, 7, 3}, {67, 201, 300}, {130, 5, 513}, {4, 3, 2}, {1, 37, 100}, {3, 50, 64}, {4, 17, 97}, {8, 33, 70},
		// More rows than a row block and more columns than a packed B block
		// (one worker then loops over both).
		{290, 1050, 20}}
	// "blocked-go" is the blocked matmul with the portable Go micro-kernel
	// even where the assembly one would run.
	for _, kind := range []string{"blocked", "blocked-go", "gonum"} {
		for _, workers := range []int{1, 3} {
			opt := Options{Workers: workers, Matmul: strings.TrimSuffix(kind, "-go")}
			b, err := NewT[float64](opt)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			f, err := New(opt)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			f.noAsm = kind == "blocked-go"
			for _, s := range shapes {
				for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
					for _, acc := range []bool{false, true} {
						m, n, k := s[0], s[1], s[2]
						name := fmt.Sprintf("%s/w%d/%dx%dx%d/t%v/acc%v", kind, workers, m, n, k, tr, acc)
						a, bb, c0 := randVec(r, m*k, 1), randVec(r, k*n, 1), randVec(r, m*n, 1)
						want := naiveMatMul(a, bb, m, n, k, tr[0], tr[1])
						if acc {
							for i := range want {
								want[i] += c0[i]
							}
						}
						c := up(b, c0)
						b.MatMul(c, up(b, a), up(b, bb), m, n, k, tr[0], tr[1], acc)
						for i, v := range down(b, c) {
							if math.Abs(v-want[i]) > 1e-12*float64(k) {
								t.Fatalf("%s f64: c[%d]=%g want %g", name, i, v, want[i])
							}
						}
						// float32: error bound ~ k·eps32·|a||b| with |a|,|b| ≤ 1.
						c32 := f.Alloc(m * n)
						f.Upload(c32, f32(c0))
						a32, b32 := f.Alloc(m*k), f.Alloc(k*n)
						f.Upload(a32, f32(a))
						f.Upload(b32, f32(bb))
						f.MatMul(c32, a32, b32, m, n, k, tr[0], tr[1], acc)
						got := make([]float32, m*n)
						f.Download(got, c32)
						for i, v := range got {
							if math.Abs(float64(v)-want[i]) > 2e-7*float64(k+2) {
								t.Fatalf("%s f32: c[%d]=%g want %g", name, i, v, want[i])
							}
						}
					}
				}
			}
		}
	}
}

func f32(v []float64) []float32 {
	o := make([]float32, len(v))
	for i, x := range v {
		o[i] = float32(x)
	}
	return o
}

func TestMatMulGrad(t *testing.T) {
	b := newB64(t, 2)
	r := rand.New(rand.NewPCG(3, 4))
	m, n, k := 3, 4, 5
	// y = x·Wᵀ (linear layer); dx = dy·W, dW = dyᵀ·x.
	gradCheck(t, "linear", [][]float64{randVec(r, m*k, 1), randVec(r, n*k, 1)},
		func(in [][]float64) []float64 {
			y := b.Alloc(m * n)
			b.MatMul(y, up(b, in[0]), up(b, in[1]), m, n, k, false, true, false)
			return down(b, y)
		},
		func(in [][]float64, dy []float64) [][]float64 {
			dx, dw := b.Alloc(m*k), b.Alloc(n*k)
			g := up(b, dy)
			b.MatMul(dx, g, up(b, in[1]), m, k, n, false, false, true)
			b.MatMul(dw, g, up(b, in[0]), n, k, m, true, false, true)
			return [][]float64{down(b, dx), down(b, dw)}
		})
}

func TestRMSNormGrad(t *testing.T) {
	b := newB64(t, 2)
	r := rand.New(rand.NewPCG(5, 6))
	rows, dim := 3, 8
	fwd := func(in [][]float64) (compute.Tensor, compute.Tensor) {
		out, rstd := b.Alloc(rows*dim), b.Alloc(rows)
		b.RMSNorm(out, rstd, up(b, in[0]), up(b, in[1]), rows, dim, 1e-6)
		return out, rstd
	}
	gradCheck(t, "rmsnorm", [][]float64{randVec(r, rows*dim, 2), randVec(r, dim, 1)},
		func(in [][]float64) []float64 { o, _ := fwd(in); return down(b, o) },
		func(in [][]float64, dy []float64) [][]float64 {
			_, rstd := fwd(in)
			dx, dw := b.Alloc(rows*dim), b.Alloc(dim)
			b.RMSNormBackward(dx, dw, up(b, dy), up(b, in[0]), up(b, in[1]), rstd, rows, dim)
			return [][]float64{down(b, dx), down(b, dw)}
		})
}

func TestRMSNormHand(t *testing.T) {
	// x = (3, 4): mean(x²) = 12.5, eps 0 → rstd = 1/sqrt(12.5).
	b := newB64(t, 1)
	out, rstd := b.Alloc(2), b.Alloc(1)
	b.RMSNorm(out, rstd, up(b, []float64{3, 4}), up(b, []float64{1, 2}), 1, 2, 0)
	s := 1 / math.Sqrt(12.5)
	got := down(b, out)
	if math.Abs(got[0]-3*s) > 1e-15 || math.Abs(got[1]-8*s) > 1e-15 {
		t.Fatalf("rmsnorm = %v, want [%g %g]", got, 3*s, 8*s)
	}
}

func TestRoPE(t *testing.T) {
	b := newB64(t, 2)
	r := rand.New(rand.NewPCG(8, 9))
	rows, heads, hd := 4, 2, 6
	pos := []int32{0, 3, 7, 100}
	p := upInts(b, pos)
	// Hand case: position 0 is the identity.
	x := randVec(r, rows*heads*hd, 1)
	xt := up(b, x)
	b.RoPE(xt, p, rows, heads, hd, 10000)
	got := down(b, xt)
	for i := range heads * hd {
		if got[i] != x[i] {
			t.Fatalf("rope at position 0 changed element %d", i)
		}
	}
	// Hand case: row 1, head 0, pair i=0 rotates by angle 3 (inv_freq 1).
	c, s := float64(float32(math.Cos(3))), float64(float32(math.Sin(3)))
	o := heads * hd
	want0 := x[o]*c - x[o+3]*s
	if math.Abs(got[o]-want0) > 1e-15 {
		t.Fatalf("rope rotation: %g want %g", got[o], want0)
	}
	gradCheck(t, "rope", [][]float64{x},
		func(in [][]float64) []float64 {
			xt := up(b, in[0])
			b.RoPE(xt, p, rows, heads, hd, 10000)
			return down(b, xt)
		},
		func(in [][]float64, dy []float64) [][]float64 {
			g := up(b, dy)
			b.RoPEBackward(g, p, rows, heads, hd, 10000)
			return [][]float64{down(b, g)}
		})
}

func TestAttentionGrad(t *testing.T) {
	b := newB64(t, 3)
	r := rand.New(rand.NewPCG(10, 11))
	B, T, hq, hkv, dd := 2, 4, 4, 2, 3
	lens := upInts(b, []int32{4, 2})
	q, k, v := randVec(r, B*T*hq*dd, 1), randVec(r, B*T*hkv*dd, 1), randVec(r, B*T*hkv*dd, 1)
	run := func(in [][]float64) (compute.Tensor, compute.Tensor) {
		out, att := b.Alloc(B*T*hq*dd), b.Alloc(B*hq*T*T)
		b.Attention(out, att, up(b, in[0]), up(b, in[1]), up(b, in[2]), lens, B, T, hq, hkv, dd)
		return out, att
	}
	gradCheck(t, "attention", [][]float64{q, k, v},
		func(in [][]float64) []float64 { o, _ := run(in); return down(b, o) },
		func(in [][]float64, dy []float64) [][]float64 {
			_, att := run(in)
			dq, dk, dv := b.Alloc(len(q)), b.Alloc(len(k)), b.Alloc(len(v))
			b.AttentionBackward(dq, dk, dv, up(b, dy), up(b, in[0]), up(b, in[1]), up(b, in[2]), att, lens, B, T, hq, hkv, dd)
			return [][]float64{down(b, dq), down(b, dk), down(b, dv)}
		})
	// Padding rows (t >= lens[b]) are zero, and row 0 of each sequence
	// attends only to itself, so its output is v[0] of its kv head.
	out, _ := run([][]float64{q, k, v})
	o := down(b, out)
	for i := 2; i < T; i++ {
		for e := range hq * dd {
			if o[((1*T+i)*hq)*dd+e] != 0 {
				t.Fatalf("padding row %d not zero", i)
			}
		}
	}
	for h := range hq {
		for e := range dd {
			if math.Abs(o[h*dd+e]-v[(h/2)*dd+e]) > 1e-15 {
				t.Fatalf("row 0 head %d: %g want %g", h, o[h*dd+e], v[(h/2)*dd+e])
			}
		}
	}
}

// TestAttentionFloat32 runs the float32 path (the assembly micro-kernel
// where available) against the float64 one; float32 rounding over d=40
// terms and a softmax of 12 keys stays well inside 1e-5.
func TestAttentionFloat32(t *testing.T) {
	b := newB64(t, 2)
	f, err := New(Options{Workers: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := rand.New(rand.NewPCG(30, 31))
	B, T, hq, hkv, dd := 2, 12, 4, 2, 40
	lensV := []int32{12, 7}
	q, k, v, g := randVec(r, B*T*hq*dd, 0.5), randVec(r, B*T*hkv*dd, 0.5), randVec(r, B*T*hkv*dd, 1), randVec(r, B*T*hq*dd, 1)
	up32 := func(x []float64) compute.Tensor { t := f.Alloc(len(x)); f.Upload(t, f32(x)); return t }
	down32 := func(x compute.Tensor) []float32 { o := make([]float32, x.Len()); f.Download(o, x); return o }
	// float64 reference
	out, att := b.Alloc(len(q)), b.Alloc(B*hq*T*T)
	l64 := upInts(b, lensV)
	b.Attention(out, att, up(b, q), up(b, k), up(b, v), l64, B, T, hq, hkv, dd)
	dq, dk, dv := b.Alloc(len(q)), b.Alloc(len(k)), b.Alloc(len(v))
	b.AttentionBackward(dq, dk, dv, up(b, g), up(b, q), up(b, k), up(b, v), att, l64, B, T, hq, hkv, dd)
	// float32
	l32 := f.AllocInts(B)
	f.UploadInts(l32, lensV)
	out32, att32 := f.Alloc(len(q)), f.Alloc(B*hq*T*T)
	q32, k32, v32 := up32(q), up32(k), up32(v)
	f.Attention(out32, att32, q32, k32, v32, l32, B, T, hq, hkv, dd)
	dq32, dk32, dv32 := f.Alloc(len(q)), f.Alloc(len(k)), f.Alloc(len(v))
	f.AttentionBackward(dq32, dk32, dv32, up32(g), q32, k32, v32, att32, l32, B, T, hq, hkv, dd)
	for _, c := range []struct {
		name string
		want compute.Tensor
		got  compute.Tensor
	}{{"out", out, out32}, {"att", att, att32}, {"dq", dq, dq32}, {"dk", dk, dk32}, {"dv", dv, dv32}} {
		w, g := down(b, c.want), down32(c.got)
		for i := range w {
			if math.Abs(float64(g[i])-w[i]) > 1e-5 {
				t.Fatalf("%s[%d]: float32 %g, float64 %g", c.name, i, g[i], w[i])
			}
		}
	}
}

func TestAttentionCachedMatchesFull(t *testing.T) {
	b := newB64(t, 2)
	r := rand.New(rand.NewPCG(12, 13))
	T, hq, hkv, dd, maxT := 5, 4, 2, 3, 8
	q, k, v := randVec(r, T*hq*dd, 1), randVec(r, T*hkv*dd, 1), randVec(r, T*hkv*dd, 1)
	full, att := b.Alloc(T*hq*dd), b.Alloc(hq*T*T)
	b.Attention(full, att, up(b, q), up(b, k), up(b, v), upInts(b, []int32{int32(T)}), 1, T, hq, hkv, dd)
	want := down(b, full)
	// Prefill 3 rows, then decode rows 3 and 4 one at a time.
	kc, vc := b.Alloc(maxT*hkv*dd), b.Alloc(maxT*hkv*dd)
	steps := [][2]int{{0, 3}, {3, 1}, {4, 1}}
	for _, s := range steps {
		st := upInts(b, []int32{int32(s[0])})
		w := hkv * dd
		b.WriteCache(kc, up(b, k[s[0]*w:(s[0]+s[1])*w]), st, 1, s[1], maxT, w)
		b.WriteCache(vc, up(b, v[s[0]*w:(s[0]+s[1])*w]), st, 1, s[1], maxT, w)
		out := b.Alloc(s[1] * hq * dd)
		b.AttentionCached(out, up(b, q[s[0]*hq*dd:(s[0]+s[1])*hq*dd]), kc, vc, st, 1, s[1], maxT, hq, hkv, dd)
		for i, g := range down(b, out) {
			if math.Abs(g-want[s[0]*hq*dd+i]) > 1e-14 {
				t.Fatalf("step %v: out[%d]=%g want %g", s, i, g, want[s[0]*hq*dd+i])
			}
		}
	}
}

func TestSwiGLUGrad(t *testing.T) {
	b := newB64(t, 2)
	r := rand.New(rand.NewPCG(14, 15))
	n := 20
	gradCheck(t, "swiglu", [][]float64{randVec(r, n, 4), randVec(r, n, 2)},
		func(in [][]float64) []float64 {
			o := b.Alloc(n)
			b.SwiGLU(o, up(b, in[0]), up(b, in[1]), n)
			return down(b, o)
		},
		func(in [][]float64, dy []float64) [][]float64 {
			dg, du := b.Alloc(n), b.Alloc(n)
			b.SwiGLUBackward(dg, du, up(b, dy), up(b, in[0]), up(b, in[1]), n)
			return [][]float64{down(b, dg), down(b, du)}
		})
}

func TestEmbedGrad(t *testing.T) {
	b := newB64(t, 2)
	r := rand.New(rand.NewPCG(16, 17))
	V, dim := 5, 3
	ids := upInts(b, []int32{1, 4, 1, 0}) // repeated id exercises the scatter-add
	gradCheck(t, "embed", [][]float64{randVec(r, V*dim, 1)},
		func(in [][]float64) []float64 {
			o := b.Alloc(4 * dim)
			b.Embed(o, up(b, in[0]), ids, 4, dim)
			return down(b, o)
		},
		func(in [][]float64, dy []float64) [][]float64 {
			dt := b.Alloc(V * dim)
			b.EmbedBackward(dt, up(b, dy), ids, 4, dim)
			return [][]float64{down(b, dt)}
		})
}

func TestBiasGrad(t *testing.T) {
	b := newB64(t, 2)
	r := rand.New(rand.NewPCG(18, 19))
	rows, cols := 3, 5
	x := randVec(r, rows*cols, 1)
	gradCheck(t, "bias", [][]float64{randVec(r, cols, 1)},
		func(in [][]float64) []float64 {
			xt := up(b, x)
			b.AddBias(xt, up(b, in[0]), rows, cols)
			return down(b, xt)
		},
		func(in [][]float64, dy []float64) [][]float64 {
			db := b.Alloc(cols)
			b.BiasBackward(db, up(b, dy), rows, cols)
			return [][]float64{down(b, db)}
		})
}

func TestLogProbs(t *testing.T) {
	b := newB64(t, 2)
	r := rand.New(rand.NewPCG(20, 21))
	rows, V := 3, 6
	tg := upInts(b, []int32{2, -1, 5})
	for _, temp := range []float64{1, 0.7} {
		it := float32(1 / temp)
		z := randVec(r, rows*V, 3)
		run := func(in [][]float64) (compute.Tensor, compute.Tensor) {
			lp, lse := b.Alloc(rows), b.Alloc(rows)
			b.LogProbs(lp, lse, up(b, in[0]), tg, rows, V, it)
			return lp, lse
		}
		// Hand check of row 0 against the definition.
		lp, _ := run([][]float64{z})
		var s float64
		for j := range V {
			s += math.Exp(z[j] * float64(it))
		}
		want := z[2]*float64(it) - math.Log(s)
		if got := down(b, lp); math.Abs(got[0]-want) > 1e-12 || got[1] != 0 {
			t.Fatalf("logprobs T=%g: %v, want row0 %g and row1 0", temp, got, want)
		}
		gradCheck(t, fmt.Sprintf("logprobs T=%g", temp), [][]float64{z},
			func(in [][]float64) []float64 { lp, _ := run(in); return down(b, lp) },
			func(in [][]float64, dy []float64) [][]float64 {
				zt := up(b, in[0])
				lp, lse := b.Alloc(rows), b.Alloc(rows)
				b.LogProbs(lp, lse, zt, tg, rows, V, it)
				b.LogProbsBackward(zt, up(b, dy), zt, lse, tg, rows, V, it) // in place
				return [][]float64{down(b, zt)}
			})
	}
}

// TestAdamW checks against the textbook form of torch.optim.AdamW, written
// independently here: decay first, then m̂ = m/(1−β1^t), v̂ = v/(1−β2^t),
// p −= lr·m̂/(sqrt(v̂)+eps).
func TestAdamW(t *testing.T) {
	b := newB64(t, 2)
	r := rand.New(rand.NewPCG(22, 23))
	n := 50
	p, m, v := randVec(r, n, 1), make([]float64, n), make([]float64, n)
	h := compute.AdamWParams{LR: 0.01, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
	pt, mt, vt := up(b, p), b.Alloc(n), b.Alloc(n)
	for step := 1; step <= 3; step++ {
		g := randVec(r, n, 1)
		h.Step = step
		b.AdamW(pt, up(b, g), mt, vt, h)
		lr, b1, b2, eps, wd := float64(h.LR), float64(h.Beta1), float64(h.Beta2), float64(h.Eps), float64(h.WeightDecay)
		for i := range p {
			p[i] -= lr * wd * p[i]
			m[i] = b1*m[i] + (1-b1)*g[i]
			v[i] = b2*v[i] + (1-b2)*g[i]*g[i]
			mh := m[i] / (1 - math.Pow(b1, float64(step)))
			vh := v[i] / (1 - math.Pow(b2, float64(step)))
			p[i] -= lr * mh / (math.Sqrt(vh) + eps)
		}
		for i, got := range down(b, pt) {
			if math.Abs(got-p[i]) > 1e-12 {
				t.Fatalf("step %d: p[%d]=%.15g want %.15g", step, i, got, p[i])
			}
		}
	}
}

func TestSumSquaresAndElementwise(t *testing.T) {
	b := newB64(t, 3)
	r := rand.New(rand.NewPCG(24, 25))
	n := 40000 // several chunks
	x := randVec(r, n, 1)
	var want float64
	for _, v := range x {
		want += v * v
	}
	xt := up(b, x)
	if got := b.SumSquares(xt); math.Abs(got-want) > 1e-9 {
		t.Fatalf("sumsquares %g want %g", got, want)
	}
	y := b.Alloc(n)
	b.Add(y, xt, xt)
	b.Accumulate(y, xt)
	b.Scale(y, 0.5)
	for i, v := range down(b, y) {
		if math.Abs(v-1.5*x[i]) > 1e-15 {
			t.Fatalf("add/accumulate/scale: y[%d]=%g want %g", i, v, 1.5*x[i])
		}
	}
}

func TestFMAPeakRuns(t *testing.T) {
	if !haveFMA() {
		t.Skip("no AVX2/FMA on this machine: the assembly kernels are not used here")
	}
	// 12 chains of x ← 0.999x + 0.001 from 0 after n steps: 1 − 0.999ⁿ each;
	// the kernel returns lane 0 of chains 0, 1 and 11 summed.
	got := float64(fmaPeak(1000))
	want := 3 * (1 - math.Pow(0.999, 1000))
	if math.Abs(got-want) > 1e-3 {
		t.Fatalf("fmaPeak(1000) = %g, want %g", got, want)
	}
}

func TestUnknownMatmul(t *testing.T) {
	if _, err := New(Options{Matmul: "fast"}); err == nil {
		t.Fatal("want error for unknown matmul kind")
	}
}
