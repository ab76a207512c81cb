// Package cpu is the pure-Go (no cgo) implementation of compute.Device.
// Ops run on a worker pool sized from runtime.GOMAXPROCS, parallel over
// rows, heads or output tiles. The element type is a type parameter: the
// trainer uses float32, gradient checks use float64 with the same code.
//
// It deliberately does no autograd and no shape tracking; callers pass
// dimensions to every op. Scratch memory is grown on first use and then
// reused, so steady-state steps do not allocate tensors.
package cpu

import (
	"fmt"
	"math"
	"runtime"

	"github.com/rlhost/rlhost/trainer/compute"
)

// Float is the element type of a CPU backend.
type Float interface{ ~float32 | ~float64 }

type tensor[T Float] struct{ d []T }

func (t *tensor[T]) Len() int { return len(t.d) }

type ints struct{ d []int32 }

func (t *ints) Len() int { return len(t.d) }

// Device is the CPU backend with element type T.
type Device[T Float] struct {
	pool       *pool
	useGonum   bool
	noAsm      bool // tests force the portable kernel with it
	noPrefetch bool // benchmarks compare the row dots without prefetching

	packA, packB [][]T       // per-worker matmul packing buffers
	dotState     [][]float32 // per-worker lane sums of chunked row dots
	dkh, dvh     []T         // per-query-head attention gradients
	rows         []T         // attention score scratch (dP, or cached-attention rows)
	invFreq      []float64
}

// Options configure a CPU backend.
type Options struct {
	// Workers is the pool size; 0 means runtime.GOMAXPROCS(0).
	Workers int
	// Matmul selects "gonum" (gonum's sgemm/dgemm) or "blocked" (the
	// hand-written kernel). Empty picks what measured fastest: blocked for
	// float32 on CPUs with AVX2/FMA, gonum otherwise (docs/trainer.md).
	// Attention always uses the blocked kernel, per head.
	Matmul string
}

// New returns a float32 CPU backend.
func New(o Options) (*Device[float32], error) { return NewT[float32](o) }

// New64 returns a float64 CPU backend (for gradient checks).
func New64(o Options) (*Device[float64], error) { return NewT[float64](o) }

// NewT returns a CPU backend with element type T.
func NewT[T Float](o Options) (*Device[T], error) {
	w := o.Workers
	if w <= 0 {
		w = runtime.GOMAXPROCS(0)
	}
	b := &Device[T]{pool: newPool(w)}
	switch o.Matmul {
	case "":
		// The measured winner (docs/trainer.md): the blocked kernel where
		// the AVX2 micro-kernel runs, gonum's SSE sgemm/dgemm elsewhere.
		_, f32 := any(T(0)).(float32)
		b.useGonum = !(f32 && haveFMA())
	case "gonum":
		b.useGonum = true
	case "blocked":
	default:
		b.pool.close()
		return nil, fmt.Errorf("cpu backend: unknown matmul %q (want gonum or blocked)", o.Matmul)
	}
	return b, nil
}

var (
	_ compute.Device    = (*Device[float32])(nil)
	_ compute.Float64IO = (*Device[float64])(nil)
)

// Name implements compute.Device.
func (b *Device[T]) Name() string {
	var z T
	mm := "blocked"
	if b.useGonum {
		mm = "gonum"
	}
	if any(z) == any(float32(0)) {
		return "cpu-f32-" + mm
	}
	return "cpu-f64-" + mm
}

// Workers is the pool size.
func (b *Device[T]) Workers() int { return b.pool.n }

// Close stops the worker goroutines.
func (b *Device[T]) Close() { b.pool.close() }

// Sync implements compute.Device: CPU ops are synchronous and panic on
// misuse, so there is never anything to wait for or report.
func (b *Device[T]) Sync() error { return nil }

// Err implements compute.Device; see Sync.
func (b *Device[T]) Err() error { return nil }

func (b *Device[T]) ensurePack() {
	if b.packA != nil {
		return
	}
	b.packA = make([][]T, b.pool.n)
	b.packB = make([][]T, b.pool.n)
	for i := range b.pool.n {
		b.packA[i] = make([]T, packASize)
	}
}

// grow returns s resized to n elements, reallocating only when it must.
func grow[T any](s *[]T, n int) []T {
	if cap(*s) < n {
		*s = make([]T, n)
	}
	*s = (*s)[:n]
	return *s
}

func d[T Float](t compute.Tensor) []T { return t.(*tensor[T]).d }
func di(t compute.Ints) []int32       { return t.(*ints).d }

// Alloc implements compute.Device.
func (b *Device[T]) Alloc(n int) compute.Tensor { return &tensor[T]{d: make([]T, n)} }

// View implements compute.Device.
func (b *Device[T]) View(t compute.Tensor, off, n int) compute.Tensor {
	return &tensor[T]{d: d[T](t)[off : off+n : off+n]}
}

// AllocInts implements compute.Device.
func (b *Device[T]) AllocInts(n int) compute.Ints { return &ints{d: make([]int32, n)} }

// ViewInts implements compute.Device.
func (b *Device[T]) ViewInts(t compute.Ints, off, n int) compute.Ints {
	return &ints{d: di(t)[off : off+n : off+n]}
}

// Upload implements compute.Device.
func (b *Device[T]) Upload(dst compute.Tensor, src []float32) {
	x := d[T](dst)
	if len(src) != len(x) {
		panic(fmt.Sprintf("cpu: upload of %d floats into tensor of %d", len(src), len(x)))
	}
	for i, v := range src {
		x[i] = T(v)
	}
}

// Download implements compute.Device.
func (b *Device[T]) Download(dst []float32, src compute.Tensor) {
	x := d[T](src)
	if len(dst) != len(x) {
		panic(fmt.Sprintf("cpu: download of tensor of %d into %d floats", len(x), len(dst)))
	}
	for i, v := range x {
		dst[i] = float32(v)
	}
}

// Upload64 implements compute.Float64IO.
func (b *Device[T]) Upload64(dst compute.Tensor, src []float64) {
	x := d[T](dst)
	if len(src) != len(x) {
		panic(fmt.Sprintf("cpu: upload of %d floats into tensor of %d", len(src), len(x)))
	}
	for i, v := range src {
		x[i] = T(v)
	}
}

// Download64 implements compute.Float64IO.
func (b *Device[T]) Download64(dst []float64, src compute.Tensor) {
	x := d[T](src)
	if len(dst) != len(x) {
		panic(fmt.Sprintf("cpu: download of tensor of %d into %d floats", len(x), len(dst)))
	}
	for i, v := range x {
		dst[i] = float64(v)
	}
}

// UploadInts implements compute.Device.
func (b *Device[T]) UploadInts(dst compute.Ints, src []int32) {
	x := di(dst)
	if len(src) != len(x) {
		panic(fmt.Sprintf("cpu: upload of %d ints into array of %d", len(src), len(x)))
	}
	copy(x, src)
}

// elementwise runs fn over [0,n) in parallel chunks of at least 16k.
func (b *Device[T]) elementwise(n int, fn func(lo, hi int)) {
	b.pool.run(n, 1<<14, func(_, lo, hi int) { fn(lo, hi) })
}

// Zero implements compute.Device.
func (b *Device[T]) Zero(t compute.Tensor) {
	x := d[T](t)
	b.elementwise(len(x), func(lo, hi int) { clear(x[lo:hi]) })
}

// Fill implements compute.Device.
func (b *Device[T]) Fill(t compute.Tensor, v float32) {
	x := d[T](t)
	b.elementwise(len(x), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			x[i] = T(v)
		}
	})
}

// Copy implements compute.Device.
func (b *Device[T]) Copy(dst, src compute.Tensor) {
	x, y := d[T](dst), d[T](src)
	if len(x) != len(y) {
		panic(fmt.Sprintf("cpu: copy of %d into %d", len(y), len(x)))
	}
	b.elementwise(len(x), func(lo, hi int) { copy(x[lo:hi], y[lo:hi]) })
}

// Add implements compute.Device.
func (b *Device[T]) Add(out, a, c compute.Tensor) {
	o, x, y := d[T](out), d[T](a), d[T](c)
	b.elementwise(len(o), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			o[i] = x[i] + y[i]
		}
	})
}

// Accumulate implements compute.Device.
func (b *Device[T]) Accumulate(dst, src compute.Tensor) {
	o, x := d[T](dst), d[T](src)
	b.elementwise(len(o), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			o[i] += x[i]
		}
	})
}

// Scale implements compute.Device.
func (b *Device[T]) Scale(t compute.Tensor, s float32) {
	x := d[T](t)
	b.elementwise(len(x), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			x[i] *= T(s)
		}
	})
}

// SumSquares implements compute.Device. Partial sums are kept per chunk
// and added in a fixed order so the result does not depend on scheduling.
func (b *Device[T]) SumSquares(t compute.Tensor) float64 {
	x := d[T](t)
	const chunk = 1 << 14
	parts := (len(x) + chunk - 1) / chunk
	sums := make([]float64, parts)
	b.pool.run(parts, 1, func(_, lo, hi int) {
		for p := lo; p < hi; p++ {
			var s float64
			for _, v := range x[p*chunk : min(len(x), (p+1)*chunk)] {
				s += float64(v) * float64(v)
			}
			sums[p] = s
		}
	})
	var s float64
	for _, v := range sums {
		s += v
	}
	return s
}

// MatMul implements compute.Device.
func (b *Device[T]) MatMul(c, a, bb compute.Tensor, m, n, k int, transA, transB, acc bool) {
	cd, ad, bd := d[T](c), d[T](a), d[T](bb)
	if len(cd) < m*n || len(ad) < m*k || len(bd) < k*n {
		panic(fmt.Sprintf("cpu: matmul %dx%dx%d on tensors of %d, %d, %d", m, n, k, len(cd), len(ad), len(bd)))
	}
	b.matmul(cd[:m*n], ad[:m*k], bd[:k*n], m, n, k, transA, transB, acc)
}

// AddBias implements compute.Device.
func (b *Device[T]) AddBias(x, bias compute.Tensor, rows, cols int) {
	xd, bd := d[T](x), d[T](bias)
	b.pool.run(rows, 16, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			row := xd[r*cols : (r+1)*cols]
			for j := range row {
				row[j] += bd[j]
			}
		}
	})
}

// BiasBackward implements compute.Device (parallel over columns, so
// workers never write the same element).
func (b *Device[T]) BiasBackward(dbias, dy compute.Tensor, rows, cols int) {
	db, g := d[T](dbias), d[T](dy)
	b.pool.run(cols, 64, func(_, lo, hi int) {
		for r := range rows {
			row := g[r*cols : (r+1)*cols]
			for j := lo; j < hi; j++ {
				db[j] += row[j]
			}
		}
	})
}

// RMSNorm implements compute.Device. The mean square is accumulated in
// float64; transformers computes it in float32, which agrees to ~1e-7.
func (b *Device[T]) RMSNorm(out, rstd, x, w compute.Tensor, rows, dim int, eps float32) {
	o, rs, xd, wd := d[T](out), d[T](rstd), d[T](x), d[T](w)
	b.pool.run(rows, 4, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			xr := xd[r*dim : (r+1)*dim]
			var ss float64
			for _, v := range xr {
				ss += float64(v) * float64(v)
			}
			s := T(1 / math.Sqrt(ss/float64(dim)+float64(eps)))
			rs[r] = s
			or := o[r*dim : (r+1)*dim]
			for i, v := range xr {
				or[i] = wd[i] * (v * s)
			}
		}
	})
}

// RMSNormBackward implements compute.Device. With y_i = w_i x_i s and
// s = (mean(x²)+eps)^-1/2:
// dx_i = s w_i dy_i − s³/dim · x_i · Σ_j w_j dy_j x_j, dw_i = Σ_rows dy_i x_i s.
func (b *Device[T]) RMSNormBackward(dx, dw, dout, x, w, rstd compute.Tensor, rows, dim int) {
	dxd, dwd, g, xd, wd, rs := d[T](dx), d[T](dw), d[T](dout), d[T](x), d[T](w), d[T](rstd)
	b.pool.run(rows, 4, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, gr, dr := xd[r*dim:(r+1)*dim], g[r*dim:(r+1)*dim], dxd[r*dim:(r+1)*dim]
			s := rs[r]
			var dot T
			for i := range xr {
				dot += wd[i] * gr[i] * xr[i]
			}
			c := s * s * s * dot / T(dim)
			for i := range xr {
				dr[i] += s*wd[i]*gr[i] - c*xr[i]
			}
		}
	})
	b.pool.run(dim, 64, func(_, lo, hi int) {
		for r := range rows {
			xr, gr, s := xd[r*dim:(r+1)*dim], g[r*dim:(r+1)*dim], rs[r]
			for i := lo; i < hi; i++ {
				dwd[i] += gr[i] * xr[i] * s
			}
		}
	})
}

// ropeFreqs fills b.invFreq the way transformers computes inv_freq in
// float32: 1 / theta^(2i/headDim), each step rounded to float32.
func (b *Device[T]) ropeFreqs(headDim int, theta float64) []float64 {
	half := headDim / 2
	f := grow(&b.invFreq, half)
	for i := range half {
		e := float32(2*i) / float32(headDim)
		p := float32(math.Pow(theta, float64(e)))
		f[i] = float64(float32(1 / p))
	}
	return f
}

func (b *Device[T]) rope(x compute.Tensor, pos compute.Ints, rows, heads, headDim int, theta float64, sign T) {
	xd, pd := d[T](x), di(pos)
	half := headDim / 2
	f := b.ropeFreqs(headDim, theta)
	b.pool.run(rows, 4, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			p := float32(pd[r])
			for i := range half {
				// Angle in float32 as transformers does, cos/sin rounded to float32.
				ang := float64(p * float32(f[i]))
				c, s := T(float32(math.Cos(ang))), sign*T(float32(math.Sin(ang)))
				for h := range heads {
					v := xd[(r*heads+h)*headDim:]
					x1, x2 := v[i], v[i+half]
					v[i] = x1*c - x2*s
					v[i+half] = x2*c + x1*s
				}
			}
		}
	})
}

// RoPE implements compute.Device.
func (b *Device[T]) RoPE(x compute.Tensor, pos compute.Ints, rows, heads, headDim int, theta float64) {
	b.rope(x, pos, rows, heads, headDim, theta, 1)
}

// RoPEBackward implements compute.Device: the rotation is orthogonal, so
// its transpose is the rotation by the negative angle.
func (b *Device[T]) RoPEBackward(dx compute.Tensor, pos compute.Ints, rows, heads, headDim int, theta float64) {
	b.rope(dx, pos, rows, heads, headDim, theta, -1)
}

// Attention implements compute.Device, parallel over (sequence, head).
// Each task runs two matmuls on the blocked kernel over the strided head
// views: S = Q·Kᵀ over the sequence's real rows, then the causal softmax
// of S·scale in place (this is att), then O = P·V. Computing the full
// square and masking wastes the upper triangle but runs at matmul speed.
func (b *Device[T]) Attention(out, att, q, k, v compute.Tensor, lens compute.Ints, B, T_, hq, hkv, dd int) {
	o, a, qd, kd, vd, ld := d[T](out), d[T](att), d[T](q), d[T](k), d[T](v), di(lens)
	scale := 1 / math.Sqrt(float64(dd))
	grp := hq / hkv
	bl, asm := b.blocking()
	vec := b.vecExp()
	b.growPackB(packBLen(bl, max(T_, dd), max(T_, dd)))
	b.pool.run(B*hq, 1, func(w, lo, hi int) {
		for task := lo; task < hi; task++ {
			bi, h := task/hq, task%hq
			g := h / grp
			n := int(ld[bi])
			P := a[task*T_*T_ : (task+1)*T_*T_]
			clear(P)
			qh, kh, vh := qd[(bi*T_*hq+h)*dd:], kd[(bi*T_*hkv+g)*dd:], vd[(bi*T_*hkv+g)*dd:]
			oh := o[(bi*T_*hq+h)*dd:]
			for i := n; i < T_; i++ {
				clear(oh[i*hq*dd : i*hq*dd+dd])
			}
			if n == 0 {
				continue
			}
			s := gemm[T]{c: P, a: qh, b: kh, m: n, n: n, k: dd, lda: hq * dd, ldb: hkv * dd, ldc: T_, transB: true}
			s.serial(bl, asm, b.packA[w], b.packB[w])
			for i := range n {
				row := P[i*T_ : i*T_+n]
				mx := math.Inf(-1)
				for j := 0; j <= i; j++ {
					mx = max(mx, float64(row[j])*scale)
				}
				var sum float64
				if vec {
					sum = expAffine32(asF32(row[:i+1]), asF32(row[:i+1]), float32(scale), float32(mx), 1)
				} else {
					for j := 0; j <= i; j++ {
						e := math.Exp(float64(row[j])*scale - mx)
						row[j] = T(e)
						sum += e
					}
				}
				inv := T(1 / sum)
				for j := 0; j <= i; j++ {
					row[j] *= inv
				}
				clear(row[i+1:])
			}
			pv := gemm[T]{c: oh, a: P, b: vh, m: n, n: dd, k: n, lda: T_, ldb: hkv * dd, ldc: hq * dd}
			pv.serial(bl, asm, b.packA[w], b.packB[w])
		}
	})
}

// AttentionBackward implements compute.Device with the matmul form of
// the softmax backward, per (sequence, query head):
//
//	dP = dO·Vᵀ, dS = P ⊙ (dP − rowsum(P ⊙ dP)) · scale,
//	dQ += dS·K, dK_h = dSᵀ·Q, dV_h = Pᵀ·dO.
//
// Query heads of one group would race on dK/dV, so each task writes its own
// per-query-head slices, summed into dk/dv per group afterwards.
func (b *Device[T]) AttentionBackward(dq, dk, dv, dout, q, k, v, att compute.Tensor, lens compute.Ints, B, T_, hq, hkv, dd int) {
	dqd, dkd, dvd, gd := d[T](dq), d[T](dk), d[T](dv), d[T](dout)
	qd, kd, vd, a, ld := d[T](q), d[T](k), d[T](v), d[T](att), di(lens)
	scale := T(1 / math.Sqrt(float64(dd)))
	grp := hq / hkv
	dkh := grow(&b.dkh, B*T_*hq*dd)
	dvh := grow(&b.dvh, B*T_*hq*dd)
	dP := grow(&b.rows, B*hq*T_*T_)
	bl, asm := b.blocking()
	b.growPackB(packBLen(bl, max(T_, dd), max(T_, dd)))
	b.pool.run(B*hq, 1, func(w, lo, hi int) {
		ap, bp := b.packA[w], b.packB[w]
		for task := lo; task < hi; task++ {
			bi, h := task/hq, task%hq
			g := h / grp
			n := int(ld[bi])
			P := a[task*T_*T_ : (task+1)*T_*T_]
			dPt := dP[task*T_*T_ : (task+1)*T_*T_]
			off := (bi*T_*hq + h) * dd
			qh, gh, dqh := qd[off:], gd[off:], dqd[off:]
			dkt, dvt := dkh[off:], dvh[off:]
			kh, vh := kd[(bi*T_*hkv+g)*dd:], vd[(bi*T_*hkv+g)*dd:]
			for i := n; i < T_; i++ {
				clear(dkt[i*hq*dd : i*hq*dd+dd])
				clear(dvt[i*hq*dd : i*hq*dd+dd])
			}
			if n == 0 {
				continue
			}
			(&gemm[T]{c: dPt, a: gh, b: vh, m: n, n: n, k: dd, lda: hq * dd, ldb: hkv * dd, ldc: T_, transB: true}).serial(bl, asm, ap, bp)
			for i := range n {
				p, dp := P[i*T_:i*T_+n], dPt[i*T_:i*T_+n]
				var dot T
				for j := 0; j <= i; j++ {
					dot += p[j] * dp[j]
				}
				for j := 0; j <= i; j++ {
					dp[j] = p[j] * (dp[j] - dot) * scale
				}
				clear(dp[i+1:])
			}
			(&gemm[T]{c: dqh, a: dPt, b: kh, m: n, n: dd, k: n, lda: T_, ldb: hkv * dd, ldc: hq * dd, acc: true}).serial(bl, asm, ap, bp)
			(&gemm[T]{c: dkt, a: dPt, b: qh, m: n, n: dd, k: n, lda: T_, ldb: hq * dd, ldc: hq * dd, transA: true}).serial(bl, asm, ap, bp)
			(&gemm[T]{c: dvt, a: P, b: gh, m: n, n: dd, k: n, lda: T_, ldb: hq * dd, ldc: hq * dd, transA: true}).serial(bl, asm, ap, bp)
		}
	})
	b.pool.run(B*T_, 4, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			for h := range hq {
				gi := h / grp
				src := dkh[(r*hq+h)*dd : (r*hq+h+1)*dd]
				srv := dvh[(r*hq+h)*dd : (r*hq+h+1)*dd]
				dst := dkd[(r*hkv+gi)*dd : (r*hkv+gi+1)*dd]
				dsv := dvd[(r*hkv+gi)*dd : (r*hkv+gi+1)*dd]
				for e := range dst {
					dst[e] += src[e]
					dsv[e] += srv[e]
				}
			}
		}
	})
}

// AttentionCached implements compute.Device, parallel over (sequence,
// query head). Each query row is computed alone, in an order fixed by its
// own length: scores by the row-invariant dot kernels, softmax, then P·V
// summed over keys in ascending order. So a row's output depends only on
// its query and the cache, never on the other rows or sequences of the
// call.
func (b *Device[T]) AttentionCached(out, q, kc, vc compute.Tensor, start compute.Ints, B, tq, maxT, hq, hkv, dd int) {
	o, qd, kd, vd, sd := d[T](out), d[T](q), d[T](kc), d[T](vc), di(start)
	scale := 1 / math.Sqrt(float64(dd))
	grp := hq / hkv
	asm := b.vecExp()
	tmp := grow(&b.rows, b.pool.n*maxT)
	b.pool.run(B*hq, 1, func(w, lo, hi int) {
		sc := tmp[w*maxT : (w+1)*maxT]
		for task := lo; task < hi; task++ {
			bi, h := task/hq, task%hq
			g := h / grp
			keys, vals := kd[(bi*maxT*hkv+g)*dd:], vd[(bi*maxT*hkv+g)*dd:]
			for i := range tq {
				n := int(sd[bi]) + i + 1 // positions 0..start+i
				qi := qd[((bi*tq+i)*hq+h)*dd : ((bi*tq+i)*hq+h+1)*dd]
				orow := o[((bi*tq+i)*hq+h)*dd : ((bi*tq+i)*hq+h+1)*dd]
				s := sc[:n]
				(&rowDot[T]{c: s, a: qi, w: keys, m: 1, n: n, k: dd, lda: dd, ldw: hkv * dd, ldc: n}).cols(0, n, asm, nil)
				mx := s[0]
				for _, v := range s {
					mx = max(mx, v)
				}
				var sum float64
				if asm {
					sum = expAffine32(asF32(s), asF32(s), float32(scale), float32(scale)*float32(mx), 1)
				} else {
					for j, v := range s {
						e := math.Exp((float64(v) - float64(mx)) * scale)
						s[j] = T(e)
						sum += e
					}
				}
				inv := T(1 / sum)
				for j := range s {
					s[j] *= inv
				}
				weightedRows(orow, s, vals, hkv*dd, asm)
			}
		}
	})
}

// WriteCache implements compute.Device.
func (b *Device[T]) WriteCache(cache, x compute.Tensor, start compute.Ints, B, tq, maxT, width int) {
	cd, xd, sd := d[T](cache), d[T](x), di(start)
	for bi := range B {
		s := int(sd[bi])
		if s < 0 || s+tq > maxT {
			panic(fmt.Sprintf("cpu: cache write at %d+%d past %d", s, tq, maxT))
		}
		copy(cd[(bi*maxT+s)*width:(bi*maxT+s+tq)*width], xd[bi*tq*width:(bi+1)*tq*width])
	}
}

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// SwiGLU implements compute.Device.
func (b *Device[T]) SwiGLU(out, gate, up compute.Tensor, n int) {
	o, g, u := d[T](out), d[T](gate), d[T](up)
	if b.vecExp() {
		b.elementwise(n, func(lo, hi int) {
			var e [swigluChunk]float32
			for c := lo; c < hi; c += swigluChunk {
				gc, uc, oc := asF32(g[c:min(c+swigluChunk, hi)]), asF32(u[c:]), asF32(o[c:])
				expAffine32(e[:len(gc)], gc, -1, 0, 1) // e^-x
				for i, x := range gc {
					oc[i] = x / (1 + e[i]) * uc[i]
				}
			}
		})
		return
	}
	b.elementwise(n, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			x := float64(g[i])
			o[i] = T(x*sigmoid(x)) * u[i]
		}
	})
}

// swigluChunk is how many e^-x the float32 SwiGLU computes at a time, on
// the stack.
const swigluChunk = 512

// SwiGLUBackward implements compute.Device. silu'(x) = σ(x)(1 + x(1−σ(x))).
func (b *Device[T]) SwiGLUBackward(dgate, dup, dout, gate, up compute.Tensor, n int) {
	dg, du, g, gt, u := d[T](dgate), d[T](dup), d[T](dout), d[T](gate), d[T](up)
	if b.vecExp() {
		b.elementwise(n, func(lo, hi int) {
			var e [swigluChunk]float32
			for c := lo; c < hi; c += swigluChunk {
				xc := asF32(gt[c:min(c+swigluChunk, hi)])
				gc, uc, dgc, duc := asF32(g[c:]), asF32(u[c:]), asF32(dg[c:]), asF32(du[c:])
				expAffine32(e[:len(xc)], xc, -1, 0, 1) // e^-x
				for i, x := range xc {
					s := 1 / (1 + e[i])
					duc[i] += gc[i] * x * s
					dgc[i] += gc[i] * uc[i] * s * (1 + x*(1-s))
				}
			}
		})
		return
	}
	b.elementwise(n, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			x := float64(gt[i])
			s := sigmoid(x)
			du[i] += g[i] * T(x*s)
			dg[i] += g[i] * u[i] * T(s*(1+x*(1-s)))
		}
	})
}

// Embed implements compute.Device.
func (b *Device[T]) Embed(out, table compute.Tensor, ids compute.Ints, rows, dim int) {
	o, tb, id := d[T](out), d[T](table), di(ids)
	b.pool.run(rows, 16, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			t := int(id[r])
			copy(o[r*dim:(r+1)*dim], tb[t*dim:(t+1)*dim])
		}
	})
}

// EmbedBackward implements compute.Device, parallel over columns so that
// repeated ids never race.
func (b *Device[T]) EmbedBackward(dtable, dout compute.Tensor, ids compute.Ints, rows, dim int) {
	dt, g, id := d[T](dtable), d[T](dout), di(ids)
	b.pool.run(dim, 64, func(_, lo, hi int) {
		for r := range rows {
			t := int(id[r])
			dst, src := dt[t*dim+lo:t*dim+hi], g[r*dim+lo:r*dim+hi]
			for i := range dst {
				dst[i] += src[i]
			}
		}
	})
}

// LogProbs implements compute.Device. Sums run in float64: a vocabulary
// of 150k terms loses ~3 digits in a float32 running sum.
func (b *Device[T]) LogProbs(logp, lse, logits compute.Tensor, targets compute.Ints, rows, vocab int, invTemp float32) {
	lp, ls, z, tg := d[T](logp), d[T](lse), d[T](logits), di(targets)
	it := float64(invTemp)
	vec := b.vecExp()
	b.pool.run(rows, 1, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			t := int(tg[r])
			if t < 0 {
				lp[r], ls[r] = 0, 0
				continue
			}
			zr := z[r*vocab : (r+1)*vocab]
			var mx, s float64
			if vec {
				// float32 exp of a float32 argument, summed in float64.
				m := T(math.Inf(-1))
				for _, v := range zr {
					m = max(m, v)
				}
				mx = float64(float32(m) * invTemp)
				s = expAffine32(nil, asF32(zr), invTemp, float32(mx), 1)
			} else {
				mx = math.Inf(-1)
				for _, v := range zr {
					mx = max(mx, float64(v)*it)
				}
				for _, v := range zr {
					s += math.Exp(float64(v)*it - mx)
				}
			}
			l := mx + math.Log(s)
			ls[r] = T(l)
			lp[r] = T(float64(zr[t])*it - l)
		}
	})
}

// LogProbsBackward implements compute.Device:
// dz_j = dlogp · invTemp · (1[j=t] − softmax(z·invTemp)_j).
func (b *Device[T]) LogProbsBackward(dlogits, dlogp, logits, lse compute.Tensor, targets compute.Ints, rows, vocab int, invTemp float32) {
	dz, g, z, ls, tg := d[T](dlogits), d[T](dlogp), d[T](logits), d[T](lse), di(targets)
	it := float64(invTemp)
	vec := b.vecExp()
	b.pool.run(rows, 1, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			t := int(tg[r])
			dr, zr := dz[r*vocab:(r+1)*vocab], z[r*vocab:(r+1)*vocab]
			if t < 0 || g[r] == 0 {
				clear(dr)
				continue
			}
			gr, l := float64(g[r])*it, float64(ls[r])
			if vec {
				expAffine32(asF32(dr), asF32(zr), invTemp, float32(l), float32(-gr))
			} else {
				for j, v := range zr {
					dr[j] = T(-gr * math.Exp(float64(v)*it-l))
				}
			}
			dr[t] += T(gr)
		}
	})
}

// AdamW implements compute.Device with torch.optim.AdamW's update:
// p -= lr·wd·p; m = β1 m + (1−β1) g; v = β2 v + (1−β2) g²;
// p -= (lr/(1−β1^t)) · m / (sqrt(v)/sqrt(1−β2^t) + eps).
func (b *Device[T]) AdamW(param, grad, m, v compute.Tensor, h compute.AdamWParams) {
	p, g, md, vd := d[T](param), d[T](grad), d[T](m), d[T](v)
	bc1 := 1 - math.Pow(float64(h.Beta1), float64(h.Step))
	bc2 := 1 - math.Pow(float64(h.Beta2), float64(h.Step))
	step := T(float64(h.LR) / bc1)
	sq := T(math.Sqrt(bc2))
	decay := T(1 - float64(h.LR)*float64(h.WeightDecay))
	b1, b2, eps := T(h.Beta1), T(h.Beta2), T(h.Eps)
	b.elementwise(len(p), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			pi := p[i] * decay
			mi := b1*md[i] + (1-b1)*g[i]
			vi := b2*vd[i] + (1-b2)*g[i]*g[i]
			md[i], vd[i] = mi, vi
			p[i] = pi - step*mi/(T(math.Sqrt(float64(vi)))/sq+eps)
		}
	})
}
