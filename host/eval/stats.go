package eval

import (
	"math"
)

// PassAtK is the unbiased estimator of pass@k of Chen et al. (2021),
// "Evaluating Large Language Models Trained on Code": given n samples of a
// task of which c passed, the chance that at least one of k samples drawn
// from them without replacement passes,
//
//	1 - C(n-c, k) / C(n, k)  =  1 - Π_{i=n-c+1..n} (1 - k/i)
//
// (the product form avoids the binomials' overflow). It needs 1 <= k <= n.
func PassAtK(n, c, k int) float64 {
	if n-c < k {
		return 1
	}
	p := 1.0
	for i := n - c + 1; i <= n; i++ {
		p *= 1 - float64(k)/float64(i)
	}
	return 1 - p
}

// meanSD returns the mean and the unbiased (n-1) standard deviation of xs
// (0 for fewer than two values).
func meanSD(xs []float64) (mean, sd float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	if len(xs) < 2 {
		return mean, 0
	}
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(ss / float64(len(xs)-1))
}

// tTest is a two-sided test of "mean 0" for a statistic with standard
// error se and df degrees of freedom: the p-value of t = diff/se. A zero
// standard error gives p 1 for a zero difference and 0 otherwise.
func tTest(diff, se, df float64) (p float64) {
	if se == 0 || df <= 0 {
		if diff == 0 || df <= 0 {
			return 1
		}
		return 0
	}
	return 2 * (1 - tCDF(math.Abs(diff/se), df))
}

// tCDF is Student's t distribution function with df degrees of freedom
// (the normal one for infinite df).
func tCDF(t, df float64) float64 {
	if math.IsInf(df, 1) {
		return 0.5 * (1 + math.Erf(t/math.Sqrt2))
	}
	x := df / (df + t*t)
	tail := 0.5 * betaInc(df/2, 0.5, x)
	if t >= 0 {
		return 1 - tail
	}
	return tail
}

// tQuantile inverts tCDF by bisection (p in (0.5, 1)).
func tQuantile(p, df float64) float64 {
	lo, hi := 0.0, 1.0
	for tCDF(hi, df) < p {
		hi *= 2
	}
	for range 200 {
		mid := (lo + hi) / 2
		if tCDF(mid, df) < p {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

// betaInc is the regularised incomplete beta function I_x(a, b), from its
// continued fraction evaluated by the modified Lentz method, using the
// symmetry I_x(a,b) = 1 - I_{1-x}(b,a) where the fraction converges slowly.
func betaInc(a, b, x float64) float64 {
	switch {
	case x <= 0:
		return 0
	case x >= 1:
		return 1
	}
	lga, _ := math.Lgamma(a)
	lgb, _ := math.Lgamma(b)
	lgab, _ := math.Lgamma(a + b)
	front := math.Exp(lgab - lga - lgb + a*math.Log(x) + b*math.Log(1-x))
	if x > (a+1)/(a+b+2) {
		return 1 - front*betaFraction(b, a, 1-x)/b
	}
	return front * betaFraction(a, b, x) / a
}

// betaFraction is the continued fraction of I_x(a, b).
func betaFraction(a, b, x float64) float64 {
	const tiny, eps = 1e-300, 1e-15
	c, d := 1.0, 1-(a+b)*x/(a+1)
	if math.Abs(d) < tiny {
		d = tiny
	}
	d = 1 / d
	f := d
	for m := 1; m <= 1000; m++ {
		fm := float64(m)
		// Even step.
		num := fm * (b - fm) * x / ((a + 2*fm - 1) * (a + 2*fm))
		d = 1 + num*d
		c = 1 + num/c
		d, c = 1/nonzero(d, tiny), nonzero(c, tiny)
		f *= d * c
		// Odd step.
		num = -(a + fm) * (a + b + fm) * x / ((a + 2*fm) * (a + 2*fm + 1))
		d = 1 + num*d
		c = 1 + num/c
		d, c = 1/nonzero(d, tiny), nonzero(c, tiny)
		delta := d * c
		f *= delta
		if math.Abs(delta-1) < eps {
			break
		}
	}
	return f
}

func nonzero(x, tiny float64) float64 {
	if math.Abs(x) < tiny {
		return tiny
	}
	return x
}
