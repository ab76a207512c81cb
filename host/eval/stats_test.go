package eval

import (
	"math"
	"math/big"
	"testing"
)

// PassAtK against 1 - C(n-c, k)/C(n, k) computed exactly with big
// integers, for every n <= 24, c <= n and k <= n.
func TestPassAtKMatchesBinomials(t *testing.T) {
	for n := 1; n <= 24; n++ {
		for c := 0; c <= n; c++ {
			for k := 1; k <= n; k++ {
				fail := new(big.Int).Binomial(int64(n-c), int64(k))
				if n-c < k {
					fail.SetInt64(0)
				}
				ratio, _ := new(big.Rat).SetFrac(fail, new(big.Int).Binomial(int64(n), int64(k))).Float64()
				want := 1 - ratio
				if got := PassAtK(n, c, k); math.Abs(got-want) > 1e-12 {
					t.Fatalf("PassAtK(n=%d, c=%d, k=%d) = %.15g, want %.15g", n, c, k, got, want)
				}
			}
		}
	}
	// pass@1 is the fraction passed; pass@n is "any passed".
	if got := PassAtK(8, 3, 1); math.Abs(got-3.0/8) > 1e-15 {
		t.Errorf("pass@1 of 3/8 = %g", got)
	}
	if PassAtK(8, 1, 8) != 1 || PassAtK(8, 0, 8) != 0 {
		t.Error("pass@n is not 'any passed'")
	}
}

// Student's t quantiles against printed tables (two-sided 95%).
func TestTQuantile(t *testing.T) {
	for _, tc := range []struct{ df, want float64 }{
		{1, 12.7062}, {2, 4.3027}, {3, 3.1824}, {5, 2.5706}, {10, 2.2281}, {30, 2.0423}, {1000, 1.9623},
	} {
		if got := tQuantile(0.975, tc.df); math.Abs(got-tc.want) > 5e-4 {
			t.Errorf("t(0.975, %g) = %.5f, want %.4f", tc.df, got, tc.want)
		}
	}
	// The distribution function is symmetric and gives the tails the
	// quantile promises.
	for _, df := range []float64{1, 4, 17} {
		q := tQuantile(0.975, df)
		if p := tTest(q, 1, df); math.Abs(p-0.05) > 1e-9 {
			t.Errorf("df %g: two-sided p at the 97.5%% quantile = %g, want 0.05", df, p)
		}
		if s := tCDF(-1.3, df) + tCDF(1.3, df); math.Abs(s-1) > 1e-12 {
			t.Errorf("df %g: F(-t) + F(t) = %g", df, s)
		}
	}
}

func TestTTestEdges(t *testing.T) {
	if p := tTest(0, 0, 3); p != 1 {
		t.Errorf("no difference, no spread: p %g, want 1", p)
	}
	if p := tTest(0.2, 0, 3); p != 0 {
		t.Errorf("a constant difference: p %g, want 0", p)
	}
	if p := tTest(1.959964, 1, math.Inf(1)); math.Abs(p-0.05) > 1e-6 {
		t.Errorf("normal limit: p %g, want 0.05", p)
	}
}
