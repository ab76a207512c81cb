package cpu

import (
	"fmt"
	"testing"
)

// BenchmarkMatMul reports GFLOP/s for both matmul kernels at shapes the
// 0.5B model uses (tokens × out × in), single-thread and all-core.
func BenchmarkMatMul(b *testing.B) {
	shapes := [][3]int{{256, 896, 896}, {256, 4864, 896}}
	for _, kind := range []string{"blocked", "gonum"} {
		for _, workers := range []int{1, 0} {
			for _, s := range shapes {
				m, n, k := s[0], s[1], s[2]
				b.Run(fmt.Sprintf("%s/w%d/%dx%dx%d", kind, workers, m, n, k), func(b *testing.B) {
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
						be.MatMul(y, x, w, m, n, k, false, true, false)
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
