package cpu

import (
	"fmt"
	"testing"
)

// BenchmarkMatMul reports GFLOP/s for both matmul kernels at the shapes of
// one 0.5B MLP projection with 256 tokens (m × n × k): the forward x·Wᵀ,
// the weight gradient dYᵀ·X, and the input gradient dY·W; single-thread
// and all-core.
func BenchmarkMatMul(b *testing.B) {
	shapes := []struct {
		name           string
		m, n, k        int
		transA, transB bool
	}{
		{"fwd", 256, 896, 896, false, true},
		{"fwd", 256, 4864, 896, false, true},
		{"dW", 4864, 896, 256, true, false},
		{"dX", 256, 896, 4864, false, false},
	}
	for _, kind := range []string{"blocked", "gonum"} {
		for _, workers := range []int{1, 0} {
			for _, s := range shapes {
				m, n, k := s.m, s.n, s.k
				b.Run(fmt.Sprintf("%s/w%d/%s-%dx%dx%d", kind, workers, s.name, m, n, k), func(b *testing.B) {
					be, err := New(Options{Workers: workers, Matmul: kind})
					if err != nil {
						b.Fatal(err)
					}
					defer be.Close()
					x, w, y := be.Alloc(m*k), be.Alloc(n*k), be.Alloc(m*n)
					be.Fill(x, 0.5)
					be.Fill(w, 0.25)
					b.ResetTimer()
					for b.Loop() {
						be.MatMul(y, x, w, m, n, k, s.transA, s.transB, false)
					}
					b.ReportMetric(2*float64(m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}

// BenchmarkFMAPeak is the single-thread scalar float32 multiply-add peak
// that pure Go code can reach: 12 independent accumulator chains, as in the
// micro-kernel, with no memory traffic.
func BenchmarkFMAPeak(b *testing.B) {
	g, sum := PeakScalarGFLOPS(b.N * 1000)
	if v, _ := PeakVectorGFLOPS(b.N * 1000); v > 0 {
		b.ReportMetric(v, "vector-GFLOP/s")
	}
	if sum == 0 {
		b.Fatal("peak loop optimised away")
	}
	b.ReportMetric(g, "GFLOP/s")
}
