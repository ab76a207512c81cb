package cpu

import (
	"fmt"
	"unsafe"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// Cache blocking for the hand-written matmul. A task owns a block of rows
// of C across a chunk of its columns. For each kc step of k it packs up to
// nb columns of B (kc×nb, kept in L2/L3) once, then for each mc-row block
// packs that block of A (mc×kc, kept in L2) and sweeps the micro-kernel
// over it, one nr-wide B panel (kc×nr, kept in L1) at a time. Packing B
// once per task rather than once per row block matters: packing costs
// about as much per element as a few hundred multiply-adds, and a task
// reuses each packed element of B for all its rows and each packed element
// of A for up to nb columns.
// Two micro-kernels share this frame:
//   - on amd64 with AVX2/FMA, float32: a 6×16 assembly kernel with twelve
//     ymm accumulators (kernel_amd64.s);
//   - elsewhere, and for float64: a 4×3 Go kernel. amd64 Go has 15 usable
//     float registers, which is what bounds the tile.
type blocking struct{ mr, nr, mc, kc int }

// Per-worker packing scratch (elements): an A block; B blocks take up to
// packBCols columns at full kc, grown to what the products need.
const (
	packASize = 264 * 256
	packBCols = 1024
)

// packBLen is the B packing scratch a product with k steps and up to n
// columns per task needs.
func packBLen(bl blocking, n, k int) int {
	return min(bl.kc, k) * min(packBCols, (n+bl.nr-1)/bl.nr*bl.nr)
}

// growPackB makes every worker's B scratch at least n elements long.
func (b *Device[T]) growPackB(n int) {
	b.ensurePack()
	for w := range b.packB {
		if len(b.packB[w]) < n {
			b.packB[w] = make([]T, n)
		}
	}
}

// matmul dispatches to gonum's sgemm/dgemm or to the hand-written kernel.
func (b *Device[T]) matmul(c, a, bb []T, m, n, k int, transA, transB, acc bool) {
	if k == 0 {
		if !acc {
			clear(c[:m*n])
		}
		return
	}
	if b.useGonum {
		b.gonumGemm(c, a, bb, m, n, k, transA, transB, acc)
		return
	}
	if m <= gemvRows && transB && !transA {
		b.rowDot(&rowDot[T]{c: c, a: a, w: bb, m: m, n: n, k: k, lda: k, ldw: k, ldc: n, acc: acc, prefetch: !b.noPrefetch})
		return
	}
	b.blockedGemm(c, a, bb, m, n, k, transA, transB, acc)
}

// gemvRows is the row count up to which x·Wᵀ runs as dot products over the
// rows of W (dot.go) instead of packed panels: a handful of rows against
// every weight is bound by reading W once, which packing would double.
const gemvRows = 8

func (b *Device[T]) gonumGemm(c, a, bb []T, m, n, k int, transA, transB, acc bool) {
	ta, tb := blas.NoTrans, blas.NoTrans
	lda, ldb := k, n
	if transA {
		ta, lda = blas.Trans, m
	}
	if transB {
		tb, ldb = blas.Trans, k
	}
	var impl gonum.Implementation
	switch cc := any(c).(type) {
	case []float32:
		beta := float32(0)
		if acc {
			beta = 1
		}
		impl.Sgemm(ta, tb, m, n, k, 1, any(a).([]float32), lda, any(bb).([]float32), ldb, beta, cc, n)
	case []float64:
		beta := 0.0
		if acc {
			beta = 1
		}
		impl.Dgemm(ta, tb, m, n, k, 1, any(a).([]float64), lda, any(bb).([]float64), ldb, beta, cc, n)
	}
}

// gemm describes one product C = op(A)·op(B) (+C) over strided matrices:
// element (i,j) of a row-major matrix X with leading dimension ldx is
// X[i*ldx+j]; op(A) is [m,k], stored [k,m] when transA.
type gemm[T Float] struct {
	c, a, b        []T
	m, n, k        int
	lda, ldb, ldc  int
	transA, transB bool
	acc            bool
}

// blockedGemm runs the hand-written matmul on the pool, one task per
// worker: a (row block, column chunk) pair. Each split halves the longer
// side, since a task packs each element of A once per column chunk it
// covers and each element of B once per row block.
func (b *Device[T]) blockedGemm(c, a, bb []T, m, n, k int, transA, transB, acc bool) {
	g := gemm[T]{c: c, a: a, b: bb, m: m, n: n, k: k, lda: k, ldb: n, ldc: n, transA: transA, transB: transB, acc: acc}
	if transA {
		g.lda = m
	}
	if transB {
		g.ldb = k
	}
	bl, asm := b.blocking()
	rg, nch := m, n
split:
	for ((m+rg-1)/rg)*((n+nch-1)/nch) < b.pool.n {
		switch {
		case rg >= nch && rg > 2*bl.mr:
			rg = ((rg/2 + bl.mr - 1) / bl.mr) * bl.mr
		case nch > 2*bl.nr:
			nch = ((nch/2 + bl.nr - 1) / bl.nr) * bl.nr
		case rg > 2*bl.mr:
			rg = ((rg/2 + bl.mr - 1) / bl.mr) * bl.mr
		default:
			break split
		}
	}
	tm, tn := (m+rg-1)/rg, (n+nch-1)/nch
	b.growPackB(packBLen(bl, nch, k))
	b.pool.run(tm*tn, 1, func(w, lo, hi int) {
		for t := lo; t < hi; t++ {
			i0, j0 := (t/tn)*rg, (t%tn)*nch
			g.tile(i0, min(rg, m-i0), j0, min(nch, n-j0), bl, asm, b.packA[w], b.packB[w])
		}
	})
}

func (b *Device[T]) blocking() (blocking, bool) {
	var z T
	if _, f32 := any(z).(float32); f32 && haveFMA() && !b.noAsm {
		return blocking{mr: 6, nr: 16, mc: 264, kc: 256}, true
	}
	return blocking{mr: 4, nr: 3, mc: 128, kc: 256}, false
}

// tile computes rows i0..i0+mm-1, columns j0..j0+nn-1 of C on one
// goroutine; ap holds an mc×kc block of A, bp at least nr columns of B at
// full kc (packBLen sizes it).
func (g *gemm[T]) tile(i0, mm, j0, nn int, bl blocking, asm bool, ap, bp []T) {
	if !g.acc {
		for i := range mm {
			clear(g.c[(i0+i)*g.ldc+j0 : (i0+i)*g.ldc+j0+nn])
		}
	}
	mr, nr := bl.mr, bl.nr
	nb := len(bp) / min(bl.kc, g.k) / nr * nr // columns of B packed at once
	if nb < nr {
		panic(fmt.Sprintf("cpu: B packing scratch of %d elements for kc=%d", len(bp), min(bl.kc, g.k)))
	}
	var t [96]T
	for jc := 0; jc < nn; jc += nb {
		ncols := min(nb, nn-jc)
		for p0 := 0; p0 < g.k; p0 += bl.kc {
			kk := min(bl.kc, g.k-p0)
			for jb := 0; jb < ncols; jb += nr {
				packB(bp[(jb/nr)*kk*nr:], g.b, p0, j0+jc+jb, kk, min(nr, ncols-jb), g.ldb, nr, g.transB)
			}
			for ic := 0; ic < mm; ic += bl.mc {
				rows := min(bl.mc, mm-ic)
				packA(ap, g.a, i0+ic, p0, rows, kk, g.lda, mr, g.transA)
				for jb := 0; jb < ncols; jb += nr {
					cols := min(nr, ncols-jb)
					bpan := bp[(jb/nr)*kk*nr : (jb/nr+1)*kk*nr]
					for ib := 0; ib < rows; ib += mr {
						apan := ap[(ib/mr)*kk*mr : (ib/mr+1)*kk*mr]
						ci, cj := i0+ic+ib, j0+jc+jb
						if asm && cols == nr && rows-ib >= mr {
							_ = g.c[(ci+mr-1)*g.ldc+cj+nr-1] // the whole tile is inside C
							kern6x16acc(kk, (*float32)(unsafe.Pointer(&apan[0])), (*float32)(unsafe.Pointer(&bpan[0])), (*float32)(unsafe.Pointer(&g.c[ci*g.ldc+cj])), g.ldc)
							continue
						}
						if asm {
							kern6x16(kk, (*float32)(unsafe.Pointer(&apan[0])), (*float32)(unsafe.Pointer(&bpan[0])), (*float32)(unsafe.Pointer(&t[0])))
						} else {
							microKernel((*[12]T)(t[:12]), apan, bpan, kk)
						}
						addTile(g.c, t[:], ci, cj, min(mr, rows-ib), cols, nr, g.ldc)
					}
				}
			}
		}
	}
}

// serial computes the whole product on the calling goroutine, with the
// caller's packing scratch (ops that are already parallel over heads).
func (g *gemm[T]) serial(bl blocking, asm bool, ap, bp []T) {
	if g.m == 0 || g.n == 0 {
		return
	}
	g.tile(0, g.m, 0, g.n, bl, asm, ap, bp)
}

// packA writes op(A)[i0:i0+mm, p0:p0+kk] as ceil(mm/mr) panels, each kk
// steps of mr values, zero-padded past mm.
func packA[T Float](dst, a []T, i0, p0, mm, kk, lda, mr int, trans bool) {
	o := 0
	for ib := 0; ib < mm; ib += mr {
		rows := min(mr, mm-ib)
		pan := dst[o : o+kk*mr]
		o += kk * mr
		switch {
		case rows == 6 && mr == 6 && trans:
			// A stored [k,m]: each step's 6 values are contiguous.
			for p := range kk {
				src := a[(p0+p)*lda+i0+ib : (p0+p)*lda+i0+ib+6]
				d := pan[p*6 : p*6+6]
				d[0], d[1], d[2], d[3], d[4], d[5] = src[0], src[1], src[2], src[3], src[4], src[5]
			}
			continue
		case rows == 6 && mr == 6:
			// Read the 6 rows in step, write the panel contiguously.
			var r [6][]T
			for j := range r {
				r[j] = a[(i0+ib+j)*lda+p0 : (i0+ib+j)*lda+p0+kk]
			}
			for p := range kk {
				d := pan[p*6 : p*6+6]
				d[0], d[1], d[2], d[3], d[4], d[5] = r[0][p], r[1][p], r[2][p], r[3][p], r[4][p], r[5][p]
			}
			continue
		}
		if rows < mr {
			clear(pan)
		}
		if trans { // A stored [k,m]: row p of storage holds column p of op(A)
			for p := range kk {
				src := a[(p0+p)*lda+i0+ib : (p0+p)*lda+i0+ib+rows]
				copy(pan[p*mr:p*mr+rows], src)
			}
		} else {
			for r := range rows {
				src := a[(i0+ib+r)*lda+p0 : (i0+ib+r)*lda+p0+kk]
				for p, v := range src {
					pan[p*mr+r] = v
				}
			}
		}
	}
}

// packB writes op(B)[p0:p0+kk, j0:j0+cols] as one panel of kk steps of nr
// values, zero-padded past cols.
func packB[T Float](dst, b []T, p0, j0, kk, cols, ldb, nr int, trans bool) {
	pan := dst[:kk*nr]
	if cols < nr {
		clear(pan)
	}
	if trans && cols == nr && nr == 16 {
		// Full panel of a row-major weight: read the 16 rows in step and
		// write the panel contiguously.
		var r [16][]T
		for j := range r {
			r[j] = b[(j0+j)*ldb+p0 : (j0+j)*ldb+p0+kk]
		}
		for p := range kk {
			o := pan[p*16 : p*16+16]
			o[0], o[1], o[2], o[3] = r[0][p], r[1][p], r[2][p], r[3][p]
			o[4], o[5], o[6], o[7] = r[4][p], r[5][p], r[6][p], r[7][p]
			o[8], o[9], o[10], o[11] = r[8][p], r[9][p], r[10][p], r[11][p]
			o[12], o[13], o[14], o[15] = r[12][p], r[13][p], r[14][p], r[15][p]
		}
		return
	}
	if trans { // B stored [n,k]
		for j := range cols {
			src := b[(j0+j)*ldb+p0 : (j0+j)*ldb+p0+kk]
			for p, v := range src {
				pan[p*nr+j] = v
			}
		}
		return
	}
	if cols == 16 && nr == 16 {
		// Four 4-element array copies compile to vector moves; copy() of
		// 64 bytes is a call into memmove per step.
		for p := range kk {
			o, src := pan[p*16:p*16+16], b[(p0+p)*ldb+j0:(p0+p)*ldb+j0+16]
			*(*[4]T)(o[0:]) = *(*[4]T)(src[0:])
			*(*[4]T)(o[4:]) = *(*[4]T)(src[4:])
			*(*[4]T)(o[8:]) = *(*[4]T)(src[8:])
			*(*[4]T)(o[12:]) = *(*[4]T)(src[12:])
		}
		return
	}
	for p := range kk {
		copy(pan[p*nr:p*nr+cols], b[(p0+p)*ldb+j0:(p0+p)*ldb+j0+cols])
	}
}

// addTile adds the rows×cols corner of tile t (row stride nr) into C at (i, j).
func addTile[T Float](c, t []T, i, j, rows, cols, nr, ldc int) {
	for r := range rows {
		row := c[(i+r)*ldc+j : (i+r)*ldc+j+cols]
		for s := range row {
			row[s] += t[r*nr+s]
		}
	}
}

// microKernel accumulates a 4×3 tile over kk steps in registers. The loop
// walks a and b by reslicing so the compiler can drop bounds checks.
func microKernel[T Float](t *[12]T, a, b []T, kk int) {
	const mr, nr = 4, 3
	var c00, c01, c02, c10, c11, c12, c20, c21, c22, c30, c31, c32 T
	a = a[:kk*mr]
	b = b[:kk*nr]
	for len(a) >= mr && len(b) >= nr {
		b0, b1, b2 := b[0], b[1], b[2]
		a0, a1, a2, a3 := a[0], a[1], a[2], a[3]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c20 += a2 * b0
		c21 += a2 * b1
		c22 += a2 * b2
		c30 += a3 * b0
		c31 += a3 * b1
		c32 += a3 * b2
		a = a[mr:]
		b = b[nr:]
	}
	*t = [12]T{c00, c01, c02, c10, c11, c12, c20, c21, c22, c30, c31, c32}
}
