//go:build !amd64

package cpu

// haveFMA is false off amd64: only the portable Go kernel exists there.
func haveFMA() bool { return false }

func kern6x16(kk int, a, b, t *float32) { panic("cpu: kern6x16 without AVX2") }

func kern6x16acc(kk int, a, b, c *float32, ldc int) { panic("cpu: kern6x16acc without AVX2") }

func fmaPeak(iters int) float32 { panic("cpu: fmaPeak without AVX2") }

func expAffine(dst, src *float32, blocks int, a, b, c float32) float64 {
	panic("cpu: expAffine without AVX2")
}

func dot4x3(k8 int, a *float32, lda int, w *float32, ldw int, st, t *float32, fl int, pf uintptr) {
	panic("cpu: dot4x3 without AVX2")
}

func dot1x12(k8 int, a *float32, w *float32, ldw int, st, t *float32, fl int) {
	panic("cpu: dot1x12 without AVX2")
}

func dot1x1(k8 int, a, w *float32, st, t *float32, fl int) { panic("cpu: dot1x1 without AVX2") }

func axpy64(n int, p *float32, v *float32, ldv int, o *float32) { panic("cpu: axpy64 without AVX2") }

func axpy32(n int, p *float32, v *float32, ldv int, o *float32) { panic("cpu: axpy32 without AVX2") }

func maxf32(x *float32, blocks int) float32 { panic("cpu: maxf32 without AVX2") }
