package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func newF32(t testing.TB, noAsm bool) *Device[float32] {
	t.Helper()
	b, err := New(Options{Workers: 3})
	if err != nil {
		t.Fatal(err)
	}
	b.noAsm = noAsm
	t.Cleanup(b.Close)
	return b
}

func randF32(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

// TestLinearRowsMatchesReference checks LinearRows against a float64
// product, with and without accumulation, over shapes that exercise every
// kernel and edge (k below 8 and with a tail, m and n off the tiles).
func TestLinearRowsMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, noAsm := range []bool{false, true} {
		be := newF32(t, noAsm)
		for _, s := range [][3]int{{1, 1, 1}, {1, 13, 7}, {3, 25, 8}, {4, 3, 16}, {5, 31, 37}, {9, 40, 64}, {17, 50, 130}, {1, 200, 96}, {3, 20, 1100}, {6, 14, 2051}} {
			m, n, k := s[0], s[1], s[2]
			for _, acc := range []bool{false, true} {
				t.Run(fmt.Sprintf("noasm=%v/%dx%dx%d/acc=%v", noAsm, m, n, k, acc), func(t *testing.T) {
					x, w, y0 := randF32(r, m*k), randF32(r, n*k), randF32(r, m*n)
					xt, wt, yt := be.Alloc(m*k), be.Alloc(n*k), be.Alloc(m*n)
					be.Upload(xt, x)
					be.Upload(wt, w)
					be.Upload(yt, y0)
					be.LinearRows(yt, xt, wt, m, n, k, acc)
					got := make([]float32, m*n)
					be.Download(got, yt)
					for i := range m {
						for j := range n {
							var want float64
							if acc {
								want = float64(y0[i*n+j])
							}
							for p := range k {
								want += float64(x[i*k+p]) * float64(w[j*k+p])
							}
							if d := math.Abs(float64(got[i*n+j]) - want); d > 1e-5*float64(k) {
								t.Fatalf("y[%d,%d] = %g, want %g", i, j, got[i*n+j], want)
							}
						}
					}
				})
			}
		}
	}
}

// TestLinearRowsBatchInvariant checks the property generation relies on:
// a row's output is bitwise the same alone, at any position of a batch of
// any size, and whatever the other rows hold.
func TestLinearRowsBatchInvariant(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, noAsm := range []bool{false, true} {
		be := newF32(t, noAsm)
		for _, s := range [][2]int{{37, 29}, {53, 64}, {27, 896}, {13, 9}, {9, 2051}} {
			n, k := s[0], s[1]
			t.Run(fmt.Sprintf("noasm=%v/n=%d/k=%d", noAsm, n, k), func(t *testing.T) {
				w := be.Alloc(n * k)
				be.Upload(w, randF32(r, n*k))
				row := randF32(r, k)
				one := func(m, at int) []float32 {
					x := randF32(r, m*k)
					copy(x[at*k:], row)
					xt, yt := be.Alloc(m*k), be.Alloc(m*n)
					be.Upload(xt, x)
					be.LinearRows(yt, xt, w, m, n, k, false)
					y := make([]float32, m*n)
					be.Download(y, yt)
					return y[at*n : (at+1)*n]
				}
				want := one(1, 0)
				for _, mm := range [][2]int{{2, 1}, {4, 3}, {5, 4}, {16, 7}, {16, 15}, {33, 32}, {70, 9}} {
					got := one(mm[0], mm[1])
					for j := range want {
						if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
							t.Fatalf("row at %d of %d: y[%d] = %x, alone %x", mm[1], mm[0], j, math.Float32bits(got[j]), math.Float32bits(want[j]))
						}
					}
				}
			})
		}
	}
}

// TestRowDotChunking checks that cutting k into chunks, which carries each
// element's lane sums from one chunk to the next, changes no bit.
func TestRowDotChunking(t *testing.T) {
	be := newF32(t, false)
	if !be.vecExp() {
		t.Skip("no AVX2/FMA: chunking is the assembly kernels'")
	}
	r := rand.New(rand.NewPCG(5, 6))
	m, n, k := 7, 29, 1043
	x, w := randF32(r, m*k), randF32(r, n*k)
	var want []float32
	for _, kc := range []int{1048, 512, 64, 8} {
		y := make([]float32, m*n)
		g := &rowDot[float32]{c: y, a: x, w: w, m: m, n: n, k: k, lda: k, ldw: k, ldc: n, kc: kc}
		g.cols(0, n, true, make([]float32, m*n*8))
		if want == nil {
			want = y
			continue
		}
		for i := range y {
			if math.Float32bits(y[i]) != math.Float32bits(want[i]) {
				t.Fatalf("chunks of %d: y[%d] = %g, unchunked %g", kc, i, y[i], want[i])
			}
		}
	}
}

// BenchmarkLinear compares LinearRows with MatMul (the blocked kernel
// above gemvRows rows) at decode and prefill shapes of the 0.5B model, on
// one thread.
func BenchmarkLinear(b *testing.B) {
	for _, s := range [][3]int{{1, 896, 896}, {1, 4864, 896}, {1, 896, 4864}, {16, 896, 896}, {16, 4864, 896}, {16, 896, 4864}, {16, 151936, 896}, {64, 4864, 896}, {256, 4864, 896}, {256, 896, 4864}} {
		m, n, k := s[0], s[1], s[2]
		for _, kind := range []string{"rows", "matmul"} {
			b.Run(fmt.Sprintf("%s/%dx%dx%d", kind, m, n, k), func(b *testing.B) {
				be, err := New(Options{Workers: 1})
				if err != nil {
					b.Fatal(err)
				}
				defer be.Close()
				x, w, y := be.Alloc(m*k), be.Alloc(n*k), be.Alloc(m*n)
				be.Fill(x, 0.5)
				be.Fill(w, 0.25)
				for b.Loop() {
					if kind == "rows" {
						be.LinearRows(y, x, w, m, n, k, false)
					} else {
						be.MatMul(y, x, w, m, n, k, false, true, false)
					}
				}
				b.ReportMetric(2*float64(m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkLinearPrefetch compares LinearRows with and without
// prefetching the next weight tile, alternating the two in every
// iteration, at 16 rows against the 0.5B output layer (545 MB, streamed
// from memory): it reports each one's milliseconds per call, the median
// and the fastest over the iterations.
func BenchmarkLinearPrefetch(b *testing.B) {
	m, n, k := 16, 151936, 896
	be, err := New(Options{Workers: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	x, y, w := be.Alloc(m*k), be.Alloc(m*n), be.Alloc(n*k)
	be.Fill(x, 0.5)
	be.Fill(w, 0.25)
	var on, off []float64
	for b.Loop() {
		for _, pf := range []bool{true, false} {
			be.noPrefetch = !pf
			start := time.Now()
			be.LinearRows(y, x, w, m, n, k, false)
			ms := float64(time.Since(start).Microseconds()) / 1000
			if pf {
				on = append(on, ms)
			} else {
				off = append(off, ms)
			}
		}
	}
	slices.Sort(on)
	slices.Sort(off)
	b.ReportMetric(on[len(on)/2], "ms-prefetch-median")
	b.ReportMetric(off[len(off)/2], "ms-plain-median")
	b.ReportMetric(on[0], "ms-prefetch-min")
	b.ReportMetric(off[0], "ms-plain-min")
}
