package grpo

import (
	"fmt"
	"math"
)

// Advantages turns the rewards of each group into per-sample advantages,
// as TRL's GRPOTrainer does with multi_objective_aggregation
// "sum_then_normalize" (rewards already summed over weighted components):
//
//	A = r - mean(group)                     scale "none"
//	A = (r - mean(group)) / (std + 1e-4)    std over the group ("group") or the whole batch ("batch")
//
// std is the unbiased (n-1) standard deviation. A NaN reward marks an
// unscorable sample: it is left out of means and stds and gets advantage
// 0. zeroStd counts groups whose scorable rewards are all equal (or that
// have fewer than two): they add no gradient.
func Advantages(rewards [][]float64, scale string) (adv [][]float64, zeroStd int, err error) {
	switch scale {
	case ScaleGroup, ScaleBatch, ScaleNone:
	default:
		return nil, 0, fmt.Errorf("grpo: scale_rewards %q is not one of group, batch, none", scale)
	}
	var all []float64
	for _, g := range rewards {
		for _, r := range g {
			if math.IsInf(r, 0) {
				return nil, 0, fmt.Errorf("grpo: reward %g is infinite", r)
			}
			all = append(all, r)
		}
	}
	_, batchStd := meanStd(all)
	adv = make([][]float64, len(rewards))
	for gi, g := range rewards {
		mean, std := meanStd(g)
		if !(std > 0) {
			zeroStd++
		}
		div := 1.0
		switch scale {
		case ScaleGroup:
			div = nanToZero(std) + 1e-4
		case ScaleBatch:
			div = nanToZero(batchStd) + 1e-4
		}
		adv[gi] = make([]float64, len(g))
		for i, r := range g {
			if a := (r - mean) / div; !math.IsNaN(a) {
				adv[gi][i] = a
			}
		}
	}
	return adv, zeroStd, nil
}

// meanStd returns the mean and unbiased std of the non-NaN values (NaN
// std for fewer than two).
func meanStd(xs []float64) (mean, std float64) {
	var n, s float64
	for _, x := range xs {
		if !math.IsNaN(x) {
			n++
			s += x
		}
	}
	if n == 0 {
		return math.NaN(), math.NaN()
	}
	mean = s / n
	var ss float64
	for _, x := range xs {
		if !math.IsNaN(x) {
			ss += (x - mean) * (x - mean)
		}
	}
	return mean, math.Sqrt(ss / (n - 1)) // NaN-free only for n >= 2
}

func nanToZero(x float64) float64 {
	if math.IsNaN(x) {
		return 0
	}
	return x
}
