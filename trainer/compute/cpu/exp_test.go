package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestExpAffineAgainstMathExp(t *testing.T) {
	if !haveFMA() {
		t.Skip("the AVX2 exp kernel needs AVX2 and FMA, which this CPU lacks")
	}
	r := rand.New(rand.NewPCG(3, 4))
	cases := []struct {
		name    string
		n       int
		a, b, c float32
		spread  float64
	}{
		{"softmax row", 151936, 1, 12.5, 1, 15},
		{"scaled, odd length", 1003, 0.125, -3, -0.25, 200},
		{"sigmoid argument", 37, -1, 0, 1, 30},
		{"shorter than a block", 5, 2, 1, 3, 4},
		{"huge arguments clamp", 64, 1, 0, 1, 400},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := make([]float32, tc.n)
			for i := range src {
				src[i] = float32((r.Float64()*2 - 1) * tc.spread)
			}
			dst := make([]float32, tc.n)
			got := expAffine32(dst, src, tc.a, tc.b, tc.c)
			if s := expAffine32(nil, src, tc.a, tc.b, tc.c); s != got {
				t.Fatalf("sum without dst %g, with dst %g", s, got)
			}
			var want float64
			for i, v := range src {
				x := float64(tc.a)*float64(v) - float64(tc.b)
				e := math.Exp(min(max(x, -86), 88.3))
				want += e
				// The argument is rounded to float32 once (|x|·2⁻²⁴
				// absolute), then a few ulps in the polynomial.
				tol := (4e-7 + 6e-8*math.Abs(x)) * e * math.Abs(float64(tc.c))
				if d := math.Abs(float64(dst[i]) - float64(tc.c)*e); d > tol {
					t.Fatalf("dst[%d]: exp(%g)·%g = %g, want %g (off %g > %g)", i, x, tc.c, dst[i], float64(tc.c)*e, d, tol)
				}
			}
			if math.Abs(got-want) > 1e-5*want {
				t.Fatalf("sum %g, want %g", got, want)
			}
		})
	}
	t.Run("NaN stays NaN", func(t *testing.T) {
		src := make([]float32, 16)
		src[3] = float32(math.NaN())
		dst := make([]float32, 16)
		if s := expAffine32(dst, src, 1, 0, 1); !math.IsNaN(s) || !math.IsNaN(float64(dst[3])) || dst[4] != 1 {
			t.Fatalf("sum %g, dst[3] %g, dst[4] %g; want NaN, NaN, 1", s, dst[3], dst[4])
		}
	})
}
