//go:build !amd64

package cpu

// haveFMA is false off amd64: only the portable Go kernel exists there.
func haveFMA() bool { return false }

func kern6x16(kk int, a, b, t *float32) { panic("cpu: kern6x16 without AVX2") }

func kern6x16acc(kk int, a, b, c *float32, ldc int) { panic("cpu: kern6x16acc without AVX2") }

func fmaPeak(iters int) float32 { panic("cpu: fmaPeak without AVX2") }

func dot32(a, b *float32, blocks int) float32 { panic("cpu: dot32 without AVX2") }

func expAffine(dst, src *float32, blocks int, a, b, c float32) float64 {
	panic("cpu: expAffine without AVX2")
}
