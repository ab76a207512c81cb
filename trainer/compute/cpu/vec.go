package cpu

import "math"

// Vector helpers for code that works on float32 rows in host memory
// outside a Device: the sampler in trainer/generate reads a row of logits
// per token, and its cost per vocabulary entry bounds how batched
// decoding scales.

// MaxFloat32 returns the largest element of x, which must not be empty;
// NaNs are ignored unless every element is one.
func MaxFloat32(x []float32) float32 {
	m := x[0]
	done := 0
	if haveFMA() && len(x) >= 32 {
		done = len(x) / 32 * 32
		m = maxf32(&x[0], len(x)/32)
	}
	for _, v := range x[done:] {
		if v > m || m != m {
			m = v
		}
	}
	return m
}

// ExpSum sets dst[i] = exp(a·src[i] − b) for every element and returns
// their sum in float64. With AVX2/FMA the exponential is a float32
// polynomial accurate to a few ulps (arguments clamped to [-86, 88.3]),
// and every element goes through it the same way wherever it sits in the
// slice; elsewhere it is math.Exp.
func ExpSum(dst, src []float32, a, b float32) float64 {
	if haveFMA() {
		return expAffine32(dst, src, a, b, 1)
	}
	var s float64
	for i, v := range src {
		e := math.Exp(float64(a)*float64(v) - float64(b))
		dst[i] = float32(e)
		s += float64(float32(e))
	}
	return s
}
