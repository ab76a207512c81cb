package cpu

import "golang.org/x/sys/cpu"

// haveFMA reports AVX2 and FMA3, which the assembly kernels need.
func haveFMA() bool { return cpu.X86.HasAVX2 && cpu.X86.HasFMA }

// kern6x16 is the AVX2/FMA micro-kernel (kernel_amd64.s): it overwrites
// t[0:96] with the 6×16 product of kk steps of packed A and B panels.
//
//go:noescape
func kern6x16(kk int, a, b, t *float32)

// kern6x16acc adds the 6×16 product into c (row stride ldc elements); the
// caller guarantees the whole tile lies inside C.
//
//go:noescape
func kern6x16acc(kk int, a, b, c *float32, ldc int)

// fmaPeak runs iters rounds of 12 independent 8-wide FMAs.
//
//go:noescape
func fmaPeak(iters int) float32

// expAffine (exp_amd64.s) computes e = exp(a·src[i] − b) over the first
// 8·blocks elements, stores c·e into dst unless dst is nil, and returns
// Σe in float64. Relative error is a few float32 ulps.
//
//go:noescape
func expAffine(dst, src *float32, blocks int, a, b, c float32) float64

// The row-invariant dot kernels (dot_amd64.s, dot.go).
//
//go:noescape
func dot4x3(k8 int, a *float32, lda int, w *float32, ldw int, st, t *float32, fl int, pf uintptr)

//go:noescape
func dot1x12(k8 int, a *float32, w *float32, ldw int, st, t *float32, fl int)

//go:noescape
func dot1x1(k8 int, a, w *float32, st, t *float32, fl int)

//go:noescape
func axpy64(n int, p *float32, v *float32, ldv int, o *float32)

//go:noescape
func axpy32(n int, p *float32, v *float32, ldv int, o *float32)

//go:noescape
func maxf32(x *float32, blocks int) float32
