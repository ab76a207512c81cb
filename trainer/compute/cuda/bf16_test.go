//go:build cudaemu || (cuda && !cudastub)

package cuda_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/rlhost/rlhost/trainer/compute"
)

// bf16Ref rounds f to the nearest bfloat16 (ties to the even mantissa) by
// comparing the two neighbours' distances in float64, independently of
// the kernel's bit trick; NaN maps to a NaN.
func bf16Ref(f float32) uint16 {
	if f != f {
		return 0x7fc0
	}
	u := math.Float32bits(f)
	if math.IsInf(float64(f), 0) {
		return uint16(u >> 16)
	}
	lo := u &^ 0xffff
	hi := lo + 0x10000
	dlo := math.Abs(float64(f) - float64(math.Float32frombits(lo)))
	dhi := math.Abs(float64(f) - bf16Wide(hi))
	switch {
	case dlo < dhi, dlo == dhi && (lo>>16)&1 == 0:
		return uint16(lo >> 16)
	default:
		return uint16(hi >> 16)
	}
}

// bf16Wide is the value of bits as a float32, treating the step past the
// largest finite value as the next power of two (it rounds to infinity).
func bf16Wide(bits uint32) float64 {
	if bits&0x7fffffff == 0x7f800000 {
		return math.Copysign(math.Ldexp(1, 128), float64(math.Float32frombits(bits)))
	}
	return float64(math.Float32frombits(bits))
}

func bf16Float(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// The device rounds to BF16 as PyTorch does: to nearest, ties to even,
// overflow to infinity, NaN kept; widening is exact.
func TestBF16Rounding(t *testing.T) {
	vals := []float32{0, float32(math.Copysign(0, -1)), 1, -1,
		math.Float32frombits(0x3f808000), // tie, even below: rounds down
		math.Float32frombits(0x3f818000), // tie, odd below: rounds up
		math.Float32frombits(0x3f808001), math.Float32frombits(0xbf817fff),
		math.MaxFloat32, -math.MaxFloat32, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		math.Float32frombits(1), math.Float32frombits(0x00018000), 1e-40, 3.14159265}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		vals = append(vals, math.Float32frombits(r.Uint32()))
	}
	be := newCUDA(t)
	x := be.Alloc(len(vals))
	be.Upload(x, vals)
	h := be.AllocBF16(len(vals))
	be.ToBF16(h, x)
	w := be.Alloc(len(vals))
	be.FromBF16(w, h)
	got := download(be, w)
	if err := be.Sync(); err != nil {
		t.Fatal(err)
	}
	for i, v := range vals {
		want := bf16Float(bf16Ref(v))
		g := got[i]
		if v != v {
			if g == g {
				t.Errorf("%x: NaN became %g", math.Float32bits(v), g)
			}
			continue
		}
		if math.Float32bits(g) != math.Float32bits(want) {
			t.Errorf("%x (%g): bf16 %x, want %x", math.Float32bits(v), v, math.Float32bits(g)>>16, math.Float32bits(want)>>16)
		}
	}
}

// MatMulBF16 against two references. (1) The CPU backend's FP32 MatMul of
// the same operands rounded to BF16: every product of two BF16 values is
// exact in FP32, so the two differ only in FP32 summation order, and
// opTol applies as for Sgemm. (2) The FP32 result of the unrounded
// operands, elementwise: each operand moves by at most 2^-9 relative, so
// each product by at most 2^-8 (plus FP32 rounding), and the error of
// element (i,j) is at most 2^-8·Σ|a||b| + FP32 noise. The BF16 result must
// also differ from the FP32 one, or the rounding did not happen.
func TestMatMulBF16(t *testing.T) {
	const m, n, k = 7, 9, 300
	for _, c := range []struct{ ta, tb, acc bool }{{false, true, false}, {false, false, true}, {true, false, false}, {true, true, true}} {
		t.Run(fmt.Sprintf("ta=%v,tb=%v,acc=%v", c.ta, c.tb, c.acc), func(t *testing.T) {
			r := rand.New(rand.NewPCG(3, 3))
			av, bv, cv := make([]float32, m*k), make([]float32, k*n), make([]float32, m*n)
			for _, s := range [][]float32{av, bv, cv} {
				for i := range s {
					s[i] = (r.Float32()*2 - 1) * 2
				}
			}
			round := func(s []float32) []float32 {
				o := make([]float32, len(s))
				for i, v := range s {
					o[i] = bf16Float(bf16Ref(v))
				}
				return o
			}
			cpu := newCPU(t)
			run := func(be compute.Device, a, b []float32) []float32 {
				ta, tb, tc := be.Alloc(m*k), be.Alloc(k*n), be.Alloc(m*n)
				be.Upload(ta, a)
				be.Upload(tb, b)
				be.Upload(tc, cv)
				be.MatMul(tc, ta, tb, m, n, k, c.ta, c.tb, c.acc)
				return download(be, tc)
			}
			ref := run(cpu, round(av), round(bv))
			full := run(cpu, av, bv)

			dev := newCUDA(t)
			ta, tb, tc := dev.Alloc(m*k), dev.Alloc(k*n), dev.Alloc(m*n)
			dev.Upload(ta, av)
			dev.Upload(tb, bv)
			dev.Upload(tc, cv)
			ha, hb := dev.AllocBF16(m*k), dev.AllocBF16(k*n)
			dev.ToBF16(ha, ta)
			dev.ToBF16(hb, tb)
			dev.MatMulBF16(tc, ha, hb, m, n, k, c.ta, c.tb, c.acc)
			got := download(dev, tc)
			if err := dev.Sync(); err != nil {
				t.Fatal(err)
			}
			compare(t, "bf16 gemm vs cpu on bf16-rounded operands", ref, got, opTol)

			at := func(i, p int) float32 { // op(A)[i,p]
				if c.ta {
					return av[p*m+i]
				}
				return av[i*k+p]
			}
			bt := func(p, j int) float32 {
				if c.tb {
					return bv[j*k+p]
				}
				return bv[p*n+j]
			}
			moved := false
			for i := range m {
				for j := range n {
					var abs float64
					for p := range k {
						abs += math.Abs(float64(at(i, p)) * float64(bt(p, j)))
					}
					d := math.Abs(float64(got[i*n+j] - full[i*n+j]))
					if d > abs/256+1e-5*abs {
						t.Errorf("(%d,%d): bf16 %g, fp32 %g: error %g above 2^-8·Σ|a||b| = %g", i, j, got[i*n+j], full[i*n+j], d, abs/256)
					}
					moved = moved || d > 0
				}
			}
			if !moved {
				t.Error("bf16 result equals the fp32 one: the operands were not rounded")
			}
		})
	}
}
