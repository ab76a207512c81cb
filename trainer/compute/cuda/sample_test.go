//go:build cudaemu || (cuda && !cudastub)

package cuda_test

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/rlhost/rlhost/trainer/compute"
	"github.com/rlhost/rlhost/trainer/compute/cuda"
	"github.com/rlhost/rlhost/trainer/generate"
)

// philox is Philox4x32-10 as k_sample computes it, for reference draws.
func philox(c [4]uint32, k0, k1 uint32) [4]uint32 {
	for range 10 {
		p0, p1 := uint64(0xD2511F53)*uint64(c[0]), uint64(0xCD9E8D57)*uint64(c[2])
		c = [4]uint32{uint32(p1>>32) ^ c[1] ^ k0, uint32(p1), uint32(p0>>32) ^ c[3] ^ k1, uint32(p0)}
		k0 += 0x9E3779B9
		k1 += 0xBB67AE85
	}
	return c
}

func uniform53(seed uint64, stream, step int32) float64 {
	c := philox([4]uint32{uint32(step), 0, uint32(stream), 0}, uint32(seed), uint32(seed>>32))
	return float64(uint64(c[0])<<21|uint64(c[1]>>11)) / (1 << 53)
}

// The generator is the published Philox4x32-10: Random123's known-answer
// vectors.
func TestPhiloxKnownAnswers(t *testing.T) {
	for _, c := range []struct {
		ctr    [4]uint32
		k0, k1 uint32
		want   [4]uint32
	}{
		{[4]uint32{}, 0, 0, [4]uint32{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
		{[4]uint32{^uint32(0), ^uint32(0), ^uint32(0), ^uint32(0)}, ^uint32(0), ^uint32(0), [4]uint32{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
	} {
		if got := philox(c.ctr, c.k0, c.k1); got != c.want {
			t.Errorf("philox(%x, %x %x) = %x, want %x", c.ctr, c.k0, c.k1, got, c.want)
		}
	}
}

// cpuProbs is softmax(z/T) from the CPU backend's LogProbs (T=1 when
// greedy), one target per vocabulary entry.
func cpuProbs(t *testing.T, z []float32, temp float32) []float64 {
	t.Helper()
	be := newCPU(t)
	V := len(z)
	if temp == 0 {
		temp = 1
	}
	rows := make([]float32, 0, V*V)
	tg := make([]int32, V)
	for i := range V {
		rows = append(rows, z...)
		tg[i] = int32(i)
	}
	lg := be.Alloc(V * V)
	be.Upload(lg, rows)
	lp, lse := be.Alloc(V), be.Alloc(V)
	be.LogProbs(lp, lse, lg, intsT(be, tg...), V, V, 1/temp)
	out := make([]float64, V)
	for i, v := range download(be, lp) {
		out[i] = math.Exp(float64(v))
	}
	return out
}

// allowed is the CPU sampler's kept set: top-k by probability (ties by
// id), then the shortest prefix reaching top-p of the rest's mass.
func allowed(p []float64, s compute.Sampling) []bool {
	order := make([]int, len(p))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Or(cmp.Compare(p[b], p[a]), cmp.Compare(a, b)) })
	if s.TopK > 0 && s.TopK < len(order) {
		order = order[:s.TopK]
	}
	if s.TopP > 0 && s.TopP < 1 {
		var total, acc float64
		for _, i := range order {
			total += p[i]
		}
		for n, i := range order {
			acc += p[i]
			if acc >= float64(s.TopP)*total {
				order = order[:n+1]
				break
			}
		}
	}
	keep := make([]bool, len(p))
	for _, i := range order {
		keep[i] = true
	}
	return keep
}

// sampleOn runs SampleTokens over rows copies of the logit rows z (row r
// uses z[r%len(z)]) with the given streams and steps.
func sampleOn(t *testing.T, be *cuda.Device, z [][]float32, stream, step []int32, s compute.Sampling) ([]int32, []float32) {
	t.Helper()
	rows, V := len(stream), len(z[0])
	flat := make([]float32, 0, rows*V)
	for r := range rows {
		flat = append(flat, z[r%len(z)]...)
	}
	lg := be.Alloc(rows * V)
	be.Upload(lg, flat)
	ids, lp := be.AllocInts(rows), be.Alloc(rows)
	be.SampleTokens(ids, lp, lg, intsT(be, stream...), intsT(be, step...), rows, V, s)
	out := make([]int32, rows)
	be.DownloadInts(out, ids)
	if err := be.Sync(); err != nil {
		t.Fatal(err)
	}
	return out, download(be, lp)
}

func randLogits(r *rand.Rand, V int, scale float32) []float32 {
	z := make([]float32, V)
	for i := range z {
		z[i] = (r.Float32()*2 - 1) * scale
	}
	return z
}

func seq(n int, from int32) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = from + int32(i)
	}
	return s
}

// Greedy on the device is the CPU sampler's argmax exactly, ties to the
// lowest id, over a vocabulary wider than a block; the log-probs agree
// to float32 rounding of a float64 log-sum-exp (1e-5 relative).
func TestSampleGreedyMatchesCPU(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const V = 1000
	var z [][]float32
	for i := range 6 {
		row := randLogits(r, V, 8)
		if i == 2 { // a tie for the maximum: the lower id wins
			row[700], row[301] = 9, 9
		}
		z = append(z, row)
	}
	ids, lp := sampleOn(t, newCUDA(t), z, seq(6, 0), seq(6, 0), compute.Sampling{Seed: 1})
	for i, row := range z {
		s := generate.NewSampler(V, generate.Options{}, 0)
		want, wlp := s.Sample(row, 0)
		if int(ids[i]) != want {
			t.Errorf("row %d: device argmax %d, cpu %d", i, ids[i], want)
		}
		if d := math.Abs(float64(lp[i] - wlp)); d > 1e-5*max(1, math.Abs(float64(wlp))) {
			t.Errorf("row %d: log-prob %g, cpu %g", i, lp[i], wlp)
		}
	}
	if ids[2] != 301 {
		t.Errorf("tie for the maximum picked %d, want 301", ids[2])
	}
}

// chiSquareCritical is the chi-square value exceeded with probability
// 1e-4 at df degrees of freedom (Wilson-Hilferty).
func chiSquareCritical(df int) float64 {
	const z = 3.719
	a := 2 / (9 * float64(df))
	return float64(df) * math.Pow(1-a+z*math.Sqrt(a), 3)
}

// chiSquare pools bins expected below 5 and returns the statistic and its
// degrees of freedom.
func chiSquare(counts []int, expect []float64) (float64, int) {
	var x2, poolE float64
	var poolN, bins int
	for i, e := range expect {
		if e == 0 {
			continue
		}
		if e < 5 {
			poolE += e
			poolN += counts[i]
			continue
		}
		x2 += (float64(counts[i]) - e) * (float64(counts[i]) - e) / e
		bins++
	}
	if poolE > 0 {
		x2 += (float64(poolN) - poolE) * (float64(poolN) - poolE) / poolE
		bins++
	}
	return x2, bins - 1
}

// Sampled tokens follow the CPU's softmax restricted to the CPU sampler's
// top-k/top-p set: no draw falls outside it; each draw is the one the
// reference scan (CPU probabilities in id order, same Philox uniform)
// picks, unless the uniform lands within 1e-5 of a boundary, where float32
// logits on the device may move it; and the counts pass a chi-square test
// at p = 1e-4 that a temperature off by half fails. The seed is fixed, so
// the test is deterministic; the thresholds say how much it can detect.
func TestSampleDistribution(t *testing.T) {
	const V, N, seed = 24, 1000, 77
	r := rand.New(rand.NewPCG(5, 6))
	z := randLogits(r, V, 2.5)
	// tied has four equal logits straddling the top-5 cut (ranks 4 to 7):
	// top-k keeps the two with the lowest ids, as the CPU sampler does.
	tied := slices.Clone(z)
	order := make([]int, V)
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(z[b], z[a]) })
	for _, i := range order[3:7] {
		tied[i] = z[order[3]]
	}
	be := newCUDA(t)
	for _, c := range []struct {
		z []float32
		s compute.Sampling
	}{
		{z, compute.Sampling{Temperature: 1}},
		{z, compute.Sampling{Temperature: 0.7, TopK: 5}},
		{tied, compute.Sampling{Temperature: 0.7, TopK: 5}},
		{z, compute.Sampling{Temperature: 1.3, TopP: 0.8}},
		{z, compute.Sampling{Temperature: 1, TopK: 10, TopP: 0.9}},
	} {
		z, s := c.z, c.s
		s.Seed = seed
		p := cpuProbs(t, z, s.Temperature)
		keep := allowed(p, s)
		var kept float64
		for i, k := range keep {
			if k {
				kept += p[i]
			}
		}
		stream, step := seq(N, 0), make([]int32, N)
		for i := range step {
			step[i] = 9
		}
		ids, lp := sampleOn(t, be, [][]float32{z}, stream, step, s)
		counts := make([]int, V)
		edges := 0
		for i, id := range ids {
			if id < 0 || int(id) >= V || !keep[id] {
				t.Fatalf("%+v: draw %d picked %d outside the kept set %v", s, i, id, keep)
			}
			counts[id]++
			if d := math.Abs(float64(lp[i]) - math.Log(p[id])); d > 1e-5*max(1, math.Abs(math.Log(p[id]))) {
				t.Fatalf("%+v: draw %d log-prob %g, cpu %g", s, i, lp[i], math.Log(p[id]))
			}
			u := uniform53(seed, stream[i], step[i]) * kept
			want, near := -1, false
			for j := range V {
				if !keep[j] {
					continue
				}
				near = near || math.Abs(u) < 1e-5*kept
				if u -= p[j]; u < 0 {
					want = j
					break
				}
			}
			near = near || math.Abs(u) < 1e-5*kept
			if want != int(id) {
				if !near {
					t.Fatalf("%+v: draw %d picked %d, reference scan %d", s, i, id, want)
				}
				edges++
			}
		}
		if edges > 2 {
			t.Errorf("%+v: %d draws off the reference at a boundary", s, edges)
		}
		expect := make([]float64, V)
		for i := range V {
			if keep[i] {
				expect[i] = N * p[i] / kept
			}
		}
		x2, df := chiSquare(counts, expect)
		if crit := chiSquareCritical(df); x2 > crit {
			t.Errorf("%+v: chi-square %.1f > %.1f (df %d): counts %v", s, x2, crit, df, counts)
		}
		if s.TopK == 0 && s.TopP == 0 {
			wrong := cpuProbs(t, z, s.Temperature*1.5)
			for i := range V {
				expect[i] = N * wrong[i]
			}
			if x2, df := chiSquare(counts, expect); x2 <= chiSquareCritical(df) {
				t.Errorf("chi-square cannot tell T=%g from T=%g: %.1f", s.Temperature, s.Temperature*1.5, x2)
			}
		}
	}
}

// A row's draw depends only on (seed, stream, step): the same rows give
// the same tokens, in any batch and order; another seed or step gives
// other tokens.
func TestSampleReproducible(t *testing.T) {
	const V = 300
	r := rand.New(rand.NewPCG(8, 9))
	var z [][]float32
	for range 12 {
		z = append(z, randLogits(r, V, 1))
	}
	be := newCUDA(t)
	s := compute.Sampling{Temperature: 1, TopK: 50, TopP: 0.95, Seed: 1 << 40}
	stream, step := seq(12, 100), seq(12, 3)
	a, _ := sampleOn(t, be, z, stream, step, s)
	b, _ := sampleOn(t, be, z, stream, step, s)
	if !slices.Equal(a, b) {
		t.Fatalf("same inputs: %v then %v", a, b)
	}
	// Rows 7, 2, 5 alone and reordered.
	sub := []int{7, 2, 5}
	var zs [][]float32
	var ss, st []int32
	for _, i := range sub {
		zs, ss, st = append(zs, z[i]), append(ss, stream[i]), append(st, step[i])
	}
	c, _ := sampleOn(t, be, zs, ss, st, s)
	for k, i := range sub {
		if c[k] != a[i] {
			t.Errorf("row %d alone picked %d, in the batch %d", i, c[k], a[i])
		}
	}
	s.Seed++
	d, _ := sampleOn(t, be, z, stream, step, s)
	e, _ := sampleOn(t, be, z, stream, seq(12, 4), compute.Sampling{Temperature: 1, TopK: 50, TopP: 0.95, Seed: 1 << 40})
	if slices.Equal(a, d) || slices.Equal(a, e) {
		t.Errorf("another seed (%v) or step (%v) drew the same tokens as %v", d, e, a)
	}
}
