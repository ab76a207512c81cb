package cpu

import (
	"math"
	"unsafe"
)

// vecExp reports whether the AVX2 exp kernel serves this backend: float32
// only, so that float64 gradient checks keep math.Exp.
func (b *Device[T]) vecExp() bool {
	var z T
	_, f32 := any(z).(float32)
	return f32 && haveFMA() && !b.noAsm
}

// asF32 views a []T whose T is float32 as []float32.
func asF32[T Float](x []T) []float32 {
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(x))), len(x))
}

// expAffine32 computes e = exp(a·src[i] − b) for every element, stores c·e
// into dst[i] unless dst is nil, and returns Σe in float64. Whole blocks of
// 8 run in the AVX2 kernel (the caller checks haveFMA), the tail in
// math.Exp.
func expAffine32(dst, src []float32, a, b, c float32) float64 {
	blocks := len(src) / 8
	var s float64
	if blocks > 0 {
		var dp *float32
		if dst != nil {
			dp = &dst[:len(src)][0]
		}
		s = expAffine(dp, &src[0], blocks, a, b, c)
	}
	for i := blocks * 8; i < len(src); i++ {
		e := math.Exp(float64(a)*float64(src[i]) - float64(b))
		s += e
		if dst != nil {
			dst[i] = c * float32(e)
		}
	}
	return s
}
