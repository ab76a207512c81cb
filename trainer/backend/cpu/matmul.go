package cpu

import (
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// Cache blocking for the hand-written matmul. One task computes an mc×nc
// tile of C, walking k in kc steps: the packed A block (mc×kc) stays in L2
// and each packed B panel (kc×nr) stays in L1 while the micro-kernel sweeps
// the A panels past it. Two micro-kernels share this frame:
//   - on amd64 with AVX2/FMA, float32: a 6×16 assembly kernel with twelve
//     ymm accumulators (kernel_amd64.s);
//   - elsewhere, and for float64: a 4×3 Go kernel. amd64 Go has 15 usable
//     float registers, which is what bounds the tile.
type blocking struct{ mr, nr, mc, nc, kc int }

var (
	goBlocking  = blocking{mr: 4, nr: 3, mc: 64, nc: 192, kc: 256}
	asmBlocking = blocking{mr: 6, nr: 16, mc: 96, nc: 128, kc: 256}
)

// packSize is the per-worker scratch both blockings need (elements).
const packSize = 192 * 256

// matmul dispatches to gonum's sgemm/dgemm or to the hand-written kernel.
func (b *Backend[T]) matmul(c, a, bb []T, m, n, k int, transA, transB, acc bool) {
	if b.useGonum {
		b.gonumGemm(c, a, bb, m, n, k, transA, transB, acc)
		return
	}
	b.blockedGemm(c, a, bb, m, n, k, transA, transB, acc)
}

func (b *Backend[T]) gonumGemm(c, a, bb []T, m, n, k int, transA, transB, acc bool) {
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

// blockedGemm is the hand-written, cache-blocked, register-tiled matmul.
// Parallel over tiles of C; each worker packs its own A block and B panel
// into per-worker scratch so that the micro-kernel reads both contiguously
// whatever the transposes are.
func (b *Backend[T]) blockedGemm(c, a, bb []T, m, n, k int, transA, transB, acc bool) {
	bl := goBlocking
	_, f32 := any(c).([]float32)
	useAsm := f32 && haveFMA && !b.noAsm
	if useAsm {
		bl = asmBlocking
	}
	tm, tn := (m+bl.mc-1)/bl.mc, (n+bl.nc-1)/bl.nc
	b.ensurePack()
	b.pool.run(tm*tn, 1, func(w, lo, hi int) {
		ap := b.packA[w]
		bp := b.packB[w]
		for t := lo; t < hi; t++ {
			i0, j0 := (t/tn)*bl.mc, (t%tn)*bl.nc
			mm, nn := min(bl.mc, m-i0), min(bl.nc, n-j0)
			if !acc {
				for i := range mm {
					clear(c[(i0+i)*n+j0 : (i0+i)*n+j0+nn])
				}
			}
			for p0 := 0; p0 < k; p0 += bl.kc {
				kk := min(bl.kc, k-p0)
				packA(ap, a, i0, p0, mm, kk, m, k, bl.mr, transA)
				packB(bp, bb, p0, j0, kk, nn, n, k, bl.nr, transB)
				if useAsm {
					macroKernelAsm(any(c).([]float32), any(ap).([]float32), any(bp).([]float32), i0, j0, mm, nn, kk, n)
				} else {
					macroKernel(c, ap, bp, i0, j0, mm, nn, kk, n)
				}
			}
		}
	})
}

// packA writes op(A)[i0:i0+mm, p0:p0+kk] as ceil(mm/mr) panels, each panel
// kk steps of mr values (zero-padded past mm).
func packA[T Float](dst, a []T, i0, p0, mm, kk, m, k, mr int, trans bool) {
	o := 0
	for ib := 0; ib < mm; ib += mr {
		for p := range kk {
			for r := range mr {
				i := ib + r
				var v T
				if i < mm {
					if trans { // A stored [k,m]
						v = a[(p0+p)*m+i0+i]
					} else {
						v = a[(i0+i)*k+p0+p]
					}
				}
				dst[o] = v
				o++
			}
		}
	}
}

// packB writes op(B)[p0:p0+kk, j0:j0+nn] as ceil(nn/nr) panels of kk steps
// of nr values (zero-padded past nn).
func packB[T Float](dst, b []T, p0, j0, kk, nn, n, k, nr int, trans bool) {
	o := 0
	for jb := 0; jb < nn; jb += nr {
		for p := range kk {
			for r := range nr {
				j := jb + r
				var v T
				if j < nn {
					if trans { // B stored [n,k]
						v = b[(j0+j)*k+p0+p]
					} else {
						v = b[(p0+p)*n+j0+j]
					}
				}
				dst[o] = v
				o++
			}
		}
	}
}

func macroKernel[T Float](c, ap, bp []T, i0, j0, mm, nn, kk, ldc int) {
	const mr, nr = 4, 3
	for jb := 0; jb < nn; jb += nr {
		bpan := bp[(jb/nr)*kk*nr : (jb/nr+1)*kk*nr]
		for ib := 0; ib < mm; ib += mr {
			apan := ap[(ib/mr)*kk*mr : (ib/mr+1)*kk*mr]
			var t [mr * nr]T
			microKernel(&t, apan, bpan, kk)
			addTile(c, t[:], i0+ib, j0+jb, min(mr, mm-ib), min(nr, nn-jb), nr, ldc)
		}
	}
}

func macroKernelAsm(c, ap, bp []float32, i0, j0, mm, nn, kk, ldc int) {
	const mr, nr = 6, 16
	var t [mr * nr]float32
	for jb := 0; jb < nn; jb += nr {
		bpan := bp[(jb/nr)*kk*nr : (jb/nr+1)*kk*nr]
		for ib := 0; ib < mm; ib += mr {
			apan := ap[(ib/mr)*kk*mr : (ib/mr+1)*kk*mr]
			kern6x16(kk, &apan[0], &bpan[0], &t[0])
			addTile(c, t[:], i0+ib, j0+jb, min(mr, mm-ib), min(nr, nn-jb), nr, ldc)
		}
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
