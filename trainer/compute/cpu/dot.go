package cpu

import (
	"fmt"
	"unsafe"

	"github.com/rlhost/rlhost/trainer/compute"
)

// Row-invariant products: c[i,j] = a_i·w_j where every element is the same
// function of its two vectors whatever else is computed with it. One
// order serves every m: eight lanes, lane l summing a[p]·w[p] for
// p ≡ l (mod 8) in ascending p, the lanes added by one fixed tree, then
// the k mod 8 tail one product at a time. (The blocked matmul sums each
// element in an order of its own, so mixing it with these kernels by row
// count would make a row's result depend on the batch.) Vectorised, this
// order reads both operands contiguously, so x·Wᵀ needs no packing at any
// m, and the same kernels serve attention scores.

var _ compute.RowLinear = (*Device[float32])(nil)

// rowDot is one product c[i*ldc+j] (+)= a_i·w_j for i < m, j < n, where
// a_i = a[i*lda:][:k] and w_j = w[j*ldw:][:k].
type rowDot[T Float] struct {
	c, a, w                []T
	m, n, k, lda, ldw, ldc int
	acc                    bool
	kc                     int  // chunk length (a multiple of 8); 0 picks it from k
	prefetch               bool // prefetch the next weight tile in the first row tile's pass
}

// Blocking: a task takes up to dotRowBlock rows of a against a block of
// rows of w that fits dotBlockBytes at the chunk length, so both stay in
// cache while the kernels sweep them. Past dotChunkMax elements, k is cut
// into chunks of dotChunk; the kernels carry each element's 8-lane sums
// from one chunk to the next in a per-worker state, so chunking changes
// no sum.
const (
	dotBlockBytes = 192 << 10
	dotRowBlock   = 64
	dotChunkMax   = 1024
	dotChunk      = 512
)

// LinearRows implements compute.RowLinear.
func (b *Device[T]) LinearRows(y, x, w compute.Tensor, m, n, k int, acc bool) {
	yd, xd, wd := d[T](y), d[T](x), d[T](w)
	if len(yd) < m*n || len(xd) < m*k || len(wd) < n*k {
		panic(fmt.Sprintf("cpu: linear %dx%dx%d on tensors of %d, %d, %d", m, n, k, len(yd), len(xd), len(wd)))
	}
	b.rowDot(&rowDot[T]{c: yd, a: xd, w: wd, m: m, n: n, k: k, lda: k, ldw: k, ldc: n, acc: acc, prefetch: !b.noPrefetch})
}

// rowDot runs g on the pool, split over units of 12 columns.
func (b *Device[T]) rowDot(g *rowDot[T]) {
	if g.m == 0 || g.n == 0 {
		return
	}
	asm := b.vecExp()
	kc, nb := g.blocking()
	if asm && kc < g.k {
		b.growDotState(min(g.m, dotRowBlock) * nb * 8)
	}
	units := (g.n + 11) / 12
	grain := max(1, (1<<16)/(12*g.m*max(g.k, 1)))
	b.pool.run(units, grain, func(w, lo, hi int) {
		var st []float32
		if b.dotState != nil {
			st = b.dotState[w]
		}
		g.cols(lo*12, min(hi*12, g.n), asm, st)
	})
}

// growDotState makes every worker's dot state at least n floats long.
func (b *Device[T]) growDotState(n int) {
	if b.dotState == nil {
		b.dotState = make([][]float32, b.pool.n)
	}
	for w := range b.dotState {
		if len(b.dotState[w]) < n {
			b.dotState[w] = make([]float32, n)
		}
	}
}

// blocking returns the chunk length and the rows of w per block.
func (g *rowDot[T]) blocking() (kc, nb int) {
	kc = g.kc
	switch {
	case kc > 0:
	case g.k > dotChunkMax:
		kc = dotChunk
	default:
		kc = g.k
	}
	return kc, max(12, dotBlockBytes/(4*max(kc, 1))/12*12)
}

// cols computes columns j0..j1-1 of every row on the calling goroutine;
// st is its state for chunked k.
func (g *rowDot[T]) cols(j0, j1 int, asm bool, st []float32) {
	k8 := g.k / 8
	if !asm || k8 == 0 {
		for i := range g.m {
			for j := j0; j < j1; j++ {
				g.store(i, j, dotLanes(g.a[i*g.lda:i*g.lda+g.k], g.w[j*g.ldw:j*g.ldw+g.k], k8))
			}
		}
		return
	}
	kc, nb := g.blocking()
	kc8 := kc / 8
	if st == nil {
		// A single chunk keeps no state; chunk still takes its address.
		var one [1]float32
		st = one[:]
	}
	for ib := 0; ib < g.m; ib += dotRowBlock {
		ie := min(ib+dotRowBlock, g.m)
		for jb := j0; jb < j1; jb += nb {
			je := min(jb+nb, j1)
			for p8 := 0; p8 < k8; p8 += kc8 {
				c8, fl := min(kc8, k8-p8), 0
				if p8 > 0 {
					fl |= 1
				}
				if p8+c8 == k8 {
					fl |= 2
				}
				g.chunk(ib, ie, jb, je, p8*8, c8, fl, st)
			}
		}
	}
}

// chunk runs the kernels over rows ib..ie-1 and columns jb..je-1 for the
// c8 blocks of 8 elements from p, each tile's lane sums at the next
// offset of st (the same tile order for every chunk), finishing the
// elements when fl&2.
func (g *rowDot[T]) chunk(ib, ie, jb, je, p, c8, fl int, st []float32) {
	a, w := asF32(g.a), asF32(g.w)
	var t [12]float32
	// A single chunk (fl == 2) keeps no state: every tile gets st[0].
	o, step := 0, 1
	if fl == 2 {
		step = 0
	}
	i := ib
	for ; i+4 <= ie; i += 4 {
		j := jb
		for ; j+3 <= je; j += 3 {
			// The first row tile reads each weight tile from memory: it
			// prefetches the next one (an address past w's end is never
			// dereferenced, a prefetch does not fault).
			var pf uintptr
			if i == ib && g.prefetch {
				pf = uintptr(unsafe.Pointer(&w[j*g.ldw+p])) + uintptr(3*g.ldw*4)
			}
			dot4x3(c8, &a[i*g.lda+p], g.lda, &w[j*g.ldw+p], g.ldw, &st[o], &t[0], fl, pf)
			o += 96 * step
			if fl&2 != 0 {
				for r := range 4 {
					for c := range 3 {
						g.store(i+r, j+c, T(t[r*3+c]))
					}
				}
			}
		}
		for ; j < je; j++ {
			for r := range 4 {
				dot1x1(c8, &a[(i+r)*g.lda+p], &w[j*g.ldw+p], &st[o], &t[0], fl)
				o += 8 * step
				if fl&2 != 0 {
					g.store(i+r, j, T(t[0]))
				}
			}
		}
	}
	for ; i < ie; i++ {
		j := jb
		for ; j+12 <= je; j += 12 {
			dot1x12(c8, &a[i*g.lda+p], &w[j*g.ldw+p], g.ldw, &st[o], &t[0], fl)
			o += 96 * step
			if fl&2 != 0 {
				for c := range 12 {
					g.store(i, j+c, T(t[c]))
				}
			}
		}
		for ; j < je; j++ {
			dot1x1(c8, &a[i*g.lda+p], &w[j*g.ldw+p], &st[o], &t[0], fl)
			o += 8 * step
			if fl&2 != 0 {
				g.store(i, j, T(t[0]))
			}
		}
	}
}

// store finishes element (i, j) from s, the lanes' sum over the first
// 8·(k/8) products: the tail products are added one at a time, in order.
func (g *rowDot[T]) store(i, j int, s T) {
	for p := g.k &^ 7; p < g.k; p++ {
		s += g.a[i*g.lda+p] * g.w[j*g.ldw+p]
	}
	if g.acc {
		g.c[i*g.ldc+j] += s
	} else {
		g.c[i*g.ldc+j] = s
	}
}

// dotLanes is the kernels' order in Go, for float64 and CPUs without
// AVX2/FMA: the same lanes and tree, each product rounded before its add.
func dotLanes[T Float](a, w []T, k8 int) T {
	var l [8]T
	for p := 0; p < 8*k8; p += 8 {
		x, y := a[p:p+8:p+8], w[p:p+8:p+8]
		l[0] += x[0] * y[0]
		l[1] += x[1] * y[1]
		l[2] += x[2] * y[2]
		l[3] += x[3] * y[3]
		l[4] += x[4] * y[4]
		l[5] += x[5] * y[5]
		l[6] += x[6] * y[6]
		l[7] += x[7] * y[7]
	}
	return ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]))
}

// weightedRows sets o[e] = Σ_j p[j]·v_j[e] for e < len(o), v_j =
// v[j*ldv:], summing in ascending j from zero: attention's P·V for one
// query row. The asm path takes 64 or 32 elements at a time; the order of
// each element's sum is the same either way.
func weightedRows[T Float](o, p, v []T, ldv int, asm bool) {
	n, dd := len(p), len(o)
	if asm && dd%32 == 0 && n > 0 {
		of, pf, vf := asF32(o), asF32(p), asF32(v)
		for e := 0; e < dd; {
			if dd-e >= 64 {
				axpy64(n, &pf[0], &vf[e], ldv, &of[e])
				e += 64
			} else {
				axpy32(n, &pf[0], &vf[e], ldv, &of[e])
				e += 32
			}
		}
		return
	}
	clear(o)
	for j, pj := range p {
		vj := v[j*ldv : j*ldv+dd]
		for e := range o {
			o[e] += pj * vj[e]
		}
	}
}
