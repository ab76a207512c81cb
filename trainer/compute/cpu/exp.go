package cpu

import "unsafe"

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
// into dst[i] unless dst is nil, and returns Σe in float64 (the caller
// checks haveFMA). Every element goes through the AVX2 kernel, the last
// len%8 padded to a whole block, so an element's value does not depend on
// where a slice of it starts or ends: SwiGLU's elements come out the same
// however the rows of a batch are split among workers.
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
	if tail := len(src) - blocks*8; tail > 0 {
		var buf [8]float32
		copy(buf[:], src[blocks*8:])
		expAffine(&buf[0], &buf[0], 1, a, b, 1)
		for i, e := range buf[:tail] {
			s += float64(e)
			if dst != nil {
				dst[blocks*8+i] = c * e
			}
		}
	}
	return s
}
