package cpu

import "time"

// PeakScalarGFLOPS times iters rounds of a register-only multiply-add loop
// with 12 independent chains (2 flops each) and returns GFLOP/s: the
// yardstick for what scalar Go float32 code can reach on this core. The
// checksum is returned only so the compiler cannot drop the loop.
func PeakScalarGFLOPS(iters int) (gflops float64, checksum float32) {
	a, x := float32(0.999), float32(1e-3)
	var c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11 float32
	start := time.Now()
	for range iters {
		c0 = c0*a + x
		c1 = c1*a + x
		c2 = c2*a + x
		c3 = c3*a + x
		c4 = c4*a + x
		c5 = c5*a + x
		c6 = c6*a + x
		c7 = c7*a + x
		c8 = c8*a + x
		c9 = c9*a + x
		c10 = c10*a + x
		c11 = c11*a + x
	}
	el := time.Since(start).Seconds()
	return 24 * float64(iters) / el / 1e9, c0 + c1 + c2 + c3 + c4 + c5 + c6 + c7 + c8 + c9 + c10 + c11
}

// PeakVectorGFLOPS is the same yardstick for 8-wide AVX2 FMAs (12
// independent ymm chains, 16 flops each), the instruction the assembly
// matmul kernel is built from. It returns 0 where AVX2/FMA is missing.
func PeakVectorGFLOPS(iters int) (gflops float64, checksum float32) {
	if !haveFMA() {
		return 0, 0
	}
	start := time.Now()
	sum := fmaPeak(iters)
	return 12 * 16 * float64(iters) / time.Since(start).Seconds() / 1e9, sum
}
