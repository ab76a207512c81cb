package grpo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os/exec"
	"testing"

	"github.com/rlhost/rlhost/trainer/torchref"
)

func near(a, b, tol float64) bool {
	return math.Abs(a-b) <= tol*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

func TestAdvantages(t *testing.T) {
	nan := math.NaN()
	s2 := math.Sqrt(0.5) // unbiased std of {1, 0}
	bstd := math.Sqrt((0.0625 + 1.5625 + 0.5625 + 0.5625) / 3)
	for _, tc := range []struct {
		name    string
		rewards [][]float64
		scale   string
		want    [][]float64
		zero    int
	}{
		{"group", [][]float64{{1, 0}}, ScaleGroup, [][]float64{{0.5 / (s2 + 1e-4), -0.5 / (s2 + 1e-4)}}, 0},
		{"equal group adds nothing", [][]float64{{1, 1, 1}, {3, 1}}, ScaleGroup,
			[][]float64{{0, 0, 0}, {1 / (math.Sqrt2 + 1e-4), -1 / (math.Sqrt2 + 1e-4)}}, 1},
		{"none", [][]float64{{3, 1}, {2, 2}}, ScaleNone, [][]float64{{1, -1}, {0, 0}}, 1},
		{"batch", [][]float64{{1, 0}, {2, 2}}, ScaleBatch,
			[][]float64{{0.5 / (bstd + 1e-4), -0.5 / (bstd + 1e-4)}, {0, 0}}, 1},
		{"unscorable", [][]float64{{1, nan, 0}}, ScaleGroup, [][]float64{{0.5 / (s2 + 1e-4), 0, -0.5 / (s2 + 1e-4)}}, 0},
		{"singleton", [][]float64{{5}}, ScaleGroup, [][]float64{{0}}, 1},
		{"all unscorable", [][]float64{{nan, nan}}, ScaleGroup, [][]float64{{0, 0}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, zero, err := Advantages(tc.rewards, tc.scale)
			if err != nil {
				t.Fatal(err)
			}
			if zero != tc.zero {
				t.Errorf("zero-std groups %d, want %d", zero, tc.zero)
			}
			for g := range tc.want {
				for i := range tc.want[g] {
					if !near(got[g][i], tc.want[g][i], 1e-12) {
						t.Errorf("A[%d][%d] = %.15g, want %.15g", g, i, got[g][i], tc.want[g][i])
					}
				}
			}
		})
	}
	if _, _, err := Advantages(nil, "mean"); err == nil {
		t.Error("bad scale accepted")
	}
	if _, _, err := Advantages([][]float64{{math.Inf(1), 0}}, ScaleGroup); err == nil {
		t.Error("infinite reward accepted")
	}
}

func TestSamplingWeights(t *testing.T) {
	old, sampled := []float64{-1, -2, -3}, []float64{-1.5, -2, -1}
	e := math.Exp
	for _, tc := range []struct {
		mode     string
		min, max float64
		want     []float64
	}{
		{CorrectionNone, 0, 3, nil},
		{CorrectionTokenTruncate, 0, 1.5, []float64{1.5, 1, e(-2)}},
		{CorrectionTokenTruncate, 0.5, 3, []float64{e(0.5), 1, 0.5}},
		{CorrectionTokenMask, 0.5, 3, []float64{e(0.5), 1, 0}},
		{CorrectionSequenceTruncate, 0, 3, []float64{e(-1.5), e(-1.5), e(-1.5)}},
		{CorrectionSequenceTruncate, 0.5, 3, []float64{0.5, 0.5, 0.5}},
		{CorrectionSequenceMask, 0.5, 3, []float64{0, 0, 0}},
		{CorrectionSequenceMask, 0.1, 3, []float64{e(-1.5), e(-1.5), e(-1.5)}},
	} {
		got := SamplingWeights(tc.mode, tc.min, tc.max, old, sampled)
		if (got == nil) != (tc.want == nil) || len(got) != len(tc.want) {
			t.Fatalf("%s [%g,%g]: %v, want %v", tc.mode, tc.min, tc.max, got, tc.want)
		}
		for i := range got {
			if !near(got[i], tc.want[i], 1e-15) {
				t.Errorf("%s [%g,%g]: w[%d] = %g, want %g", tc.mode, tc.min, tc.max, i, got[i], tc.want[i])
			}
		}
	}
}

func TestLossHandComputed(t *testing.T) {
	ln2, ln15, ln05 := math.Log(2), math.Log(1.5), math.Log(0.5)
	base := LossParams{Type: LossDAPO, Epsilon: 0.2, EpsilonHigh: 0.2, Level: LevelToken, AccumSteps: 1, NumItemsInBatch: 4}
	with := func(f func(*LossParams)) LossParams { p := base; f(&p); return p }
	for _, tc := range []struct {
		name      string
		p         LossParams
		seqs      []LossSeq
		loss      float64
		grad      [][]float64
		low, high float64 // clipped counts
		kl        float64
	}{
		{"dapo on-policy", base, []LossSeq{{LogP: []float64{-1, -2}, OldLogP: []float64{-1, -2}, Adv: 1}},
			-0.5, [][]float64{{-0.25, -0.25}}, 0, 0, 0},
		{"clipped high", base, []LossSeq{{LogP: []float64{ln15}, OldLogP: []float64{0}, Adv: 1}},
			-1.2 / 4, [][]float64{{0}}, 0, 1, 0},
		{"clipped low", base, []LossSeq{{LogP: []float64{ln05}, OldLogP: []float64{0}, Adv: -1}},
			0.8 / 4, [][]float64{{0}}, 1, 0, 0},
		{"low ratio, positive advantage: not clipped", base, []LossSeq{{LogP: []float64{ln05}, OldLogP: []float64{0}, Adv: 1}},
			-0.5 / 4, [][]float64{{-0.5 / 4}}, 0, 0, 0},
		{"grpo per-sequence mean", with(func(p *LossParams) { p.Type = LossGRPO; p.AccumSteps = 2 }),
			[]LossSeq{{LogP: []float64{-1}, OldLogP: []float64{-1}, Adv: 1}, {LogP: []float64{-1, -1, -1}, OldLogP: []float64{-1, -1, -1}, Adv: 1}},
			-0.5, [][]float64{{-0.25}, {-1.0 / 12, -1.0 / 12, -1.0 / 12}}, 0, 0, 0},
		{"bnpo", with(func(p *LossParams) { p.Type = LossBNPO; p.AccumSteps = 2 }),
			[]LossSeq{{LogP: []float64{-1}, OldLogP: []float64{-1}, Adv: 2}, {LogP: []float64{-1, -1, -1}, OldLogP: []float64{-1, -1, -1}, Adv: -1}},
			(-2 + 3) / 4.0 / 2, [][]float64{{-2.0 / 8}, {1.0 / 8, 1.0 / 8, 1.0 / 8}}, 0, 0, 0},
		{"dr_grpo", with(func(p *LossParams) { p.Type = LossDrGRPO; p.MaxCompletionLength = 10 }),
			[]LossSeq{{LogP: []float64{-1, -1}, OldLogP: []float64{-1, -1}, Adv: 1}},
			-2.0 / 10, [][]float64{{-0.1, -0.1}}, 0, 0, 0},
		{"kl", with(func(p *LossParams) { p.Beta = 0.5; p.NumItemsInBatch = 1 }),
			[]LossSeq{{LogP: []float64{-2}, OldLogP: []float64{-2}, RefLogP: []float64{-2 + ln2}, Adv: 0}},
			0.5 * (1 - ln2), [][]float64{{0.5 * (1 - 2)}}, 0, 0, 1 - ln2},
		{"sequence level clipped", with(func(p *LossParams) { p.Level = LevelSequence; p.NumItemsInBatch = 2 }),
			[]LossSeq{{LogP: []float64{ln2, 0}, OldLogP: []float64{0, 0}, Adv: 1}},
			-1.2, [][]float64{{0, 0}}, 0, 1, 0},
		{"sampling correction", with(func(p *LossParams) { p.NumItemsInBatch = 2 }),
			[]LossSeq{{LogP: []float64{-1, -1}, OldLogP: []float64{-1, -1}, Adv: 1, ISWeight: []float64{0.5, 2}}},
			-(0.5 + 2) / 2, [][]float64{{-0.25, -1}}, 0, 0, 0},
		{"sampling correction, sequence level", with(func(p *LossParams) { p.Level = LevelSequence; p.NumItemsInBatch = 2 }),
			[]LossSeq{{LogP: []float64{-1, -1}, OldLogP: []float64{-1, -1}, Adv: 1, ISWeight: []float64{0.5, 2}}},
			-(0.5 + 2) / 2, [][]float64{{-1.25 / 2, -1.25 / 2}}, 0, 0, 0},
		{"sequence level unclipped", with(func(p *LossParams) { p.Level = LevelSequence; p.NumItemsInBatch = 2 }),
			[]LossSeq{{LogP: []float64{0.2, 0}, OldLogP: []float64{0, 0}, Adv: 1}},
			-math.Exp(0.1), [][]float64{{-math.Exp(0.1) / 2, -math.Exp(0.1) / 2}}, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			grad := make([][]float64, len(tc.seqs))
			for i, s := range tc.seqs {
				grad[i] = make([]float64, len(s.LogP))
			}
			st, err := Loss(tc.p, tc.seqs, grad)
			if err != nil {
				t.Fatal(err)
			}
			if !near(st.Loss, tc.loss, 1e-12) {
				t.Errorf("loss %.15g, want %.15g", st.Loss, tc.loss)
			}
			for i := range grad {
				for k := range grad[i] {
					if !near(grad[i][k], tc.grad[i][k], 1e-12) {
						t.Errorf("grad[%d][%d] %.15g, want %.15g", i, k, grad[i][k], tc.grad[i][k])
					}
				}
			}
			if st.ClipLow != tc.low || st.ClipHigh != tc.high {
				t.Errorf("clipped low %g high %g, want %g %g", st.ClipLow, st.ClipHigh, tc.low, tc.high)
			}
			if !near(st.KLSum, tc.kl, 1e-12) {
				t.Errorf("kl %g, want %g", st.KLSum, tc.kl)
			}
		})
	}
}

func perturb(r *rand.Rand, xs []float64, sd float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = x + sd*r.NormFloat64()
	}
	return out
}

// refCase is one input of testdata/trl_loss.py.
type refCase struct {
	Type                string   `json:"type"`
	Epsilon             float64  `json:"epsilon"`
	EpsilonHigh         float64  `json:"epsilon_high"`
	Beta                float64  `json:"beta"`
	Level               string   `json:"level"`
	MaxCompletionLength int      `json:"max_completion_length"`
	SAPOTempPos         float64  `json:"sapo_temperature_pos"`
	SAPOTempNeg         float64  `json:"sapo_temperature_neg"`
	AccumSteps          int      `json:"accum_steps"`
	NumItemsInBatch     int      `json:"num_items_in_batch"`
	Seqs                []refSeq `json:"seqs"`
}

type refSeq struct {
	LogP []float64 `json:"logp"`
	Old  []float64 `json:"old"`
	Ref  []float64 `json:"ref"`
	ISW  []float64 `json:"isw"`
	Adv  float64   `json:"adv"`
}

type refOut struct {
	Loss       float64     `json:"loss"`
	Grad       [][]float64 `json:"grad"`
	ClipLow    float64     `json:"clip_low"`
	ClipHigh   float64     `json:"clip_high"`
	ClipRegion float64     `json:"clip_region"`
	KL         *float64    `json:"kl"`
}

// TestLossMatchesTRLReference compares Loss with testdata/trl_loss.py,
// TRL's _compute_loss transcribed into PyTorch and differentiated by
// autograd, on random micro-batches: every loss type, token and sequence
// level, with and without KL, on-policy (μ = 1: old = current) and
// off-policy (μ > 1: old ≠ current, with ratios outside the clip range),
// with and without a sampling correction.
func TestLossMatchesTRLReference(t *testing.T) {
	torchref.Require(t)
	py := torchref.Python
	r := rand.New(rand.NewPCG(42, 7))
	var cases []refCase
	for _, typ := range LossTypes {
		for _, level := range []string{LevelToken, LevelSequence} {
			for _, beta := range []float64{0, 0.04} {
				for _, variant := range []int{0, 1, 2, 3} {
					// 0: on-policy (μ = 1); 1: off-policy (μ > 1); 2, 3: the
					// same with a token- or sequence-constant sampling correction.
					offPolicy := variant%2 == 1
					c := refCase{Type: typ, Epsilon: 0.2, EpsilonHigh: 0.28, Beta: beta, Level: level,
						MaxCompletionLength: 7, SAPOTempPos: 0.9, SAPOTempNeg: 1.6, AccumSteps: 3}
					if typ == LossCISPO {
						c.EpsilonHigh = 1.3 // ε_max: a cap on the ratio itself, reached off-policy
					}
					for i := range 4 {
						n := r.IntN(6)
						if i == 0 {
							n = 0 // a fully masked sequence (prompt-only or masked truncation)
						}
						s := refSeq{Adv: r.NormFloat64()}
						for range n {
							lp := -3 * r.Float64()
							old := lp
							if offPolicy {
								old = lp + 0.4*r.NormFloat64()
							}
							s.LogP, s.Old = append(s.LogP, lp), append(s.Old, old)
							s.Ref = append(s.Ref, lp+0.5*r.NormFloat64())
						}
						if variant >= 2 {
							s.ISW = SamplingWeights([]string{CorrectionTokenTruncate, CorrectionSequenceMask}[i%2], 0.5, 2,
								s.Old, perturb(r, s.Old, 0.5))
						}
						c.NumItemsInBatch += n
						c.Seqs = append(c.Seqs, s)
					}
					c.NumItemsInBatch += 11 // tokens of the step's other micro-batches
					cases = append(cases, c)
				}
			}
		}
	}
	in, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, "testdata/trl_loss.py")
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("trl_loss.py: %v\n%s", err, stderr.String())
	}
	var want []refOut
	if err := json.Unmarshal(out, &want); err != nil {
		t.Fatal(err)
	}
	if len(want) != len(cases) {
		t.Fatalf("reference returned %d results for %d cases", len(want), len(cases))
	}
	var clipped float64
	for ci, c := range cases {
		name := fmt.Sprintf("%s/%s/beta=%g/variant %d", c.Type, c.Level, c.Beta, ci%4)
		p := LossParams{Type: c.Type, Epsilon: c.Epsilon, EpsilonHigh: c.EpsilonHigh, Beta: c.Beta, Level: c.Level,
			MaxCompletionLength: c.MaxCompletionLength, SAPOTempPos: c.SAPOTempPos, SAPOTempNeg: c.SAPOTempNeg,
			AccumSteps: c.AccumSteps, NumItemsInBatch: c.NumItemsInBatch}
		seqs := make([]LossSeq, len(c.Seqs))
		grad := make([][]float64, len(c.Seqs))
		for i, s := range c.Seqs {
			seqs[i] = LossSeq{LogP: s.LogP, OldLogP: s.Old, Adv: s.Adv, ISWeight: s.ISW}
			if c.Beta != 0 {
				seqs[i].RefLogP = s.Ref
			}
			grad[i] = make([]float64, len(s.LogP))
		}
		st, err := Loss(p, seqs, grad)
		if err != nil {
			t.Fatal(err)
		}
		w := want[ci]
		if !near(st.Loss, w.Loss, 1e-12) {
			t.Errorf("%s: loss %.15g, torch %.15g", name, st.Loss, w.Loss)
		}
		for i := range grad {
			for k := range grad[i] {
				if !near(grad[i][k], w.Grad[i][k], 1e-12) {
					t.Errorf("%s: dloss/dlogp[%d][%d] %.15g, torch %.15g", name, i, k, grad[i][k], w.Grad[i][k])
				}
			}
		}
		clipN := max(1, st.ClipN)
		low, high := st.ClipLow/clipN, st.ClipHigh/clipN
		if !near(low, w.ClipLow, 1e-12) || !near(high, w.ClipHigh, 1e-12) || !near(low+high, w.ClipRegion, 1e-12) {
			t.Errorf("%s: clip low/high %g/%g, torch %g/%g/%g", name, low, high, w.ClipLow, w.ClipHigh, w.ClipRegion)
		}
		clipped += w.ClipRegion
		if c.Beta != 0 && (w.KL == nil || !near(st.KLSum/float64(max(1, st.Tokens)), *w.KL, 1e-12)) {
			t.Errorf("%s: kl %g, torch %v", name, st.KLSum/float64(max(1, st.Tokens)), w.KL)
		}
	}
	if clipped == 0 {
		t.Fatal("no case had clipping active; the comparison would not cover the clipped branch")
	}
}

// FuzzLossGradient checks Loss's gradient against central differences of
// Loss itself on arbitrary inputs, away from the clip bounds where the
// loss has a kink.
func FuzzLossGradient(f *testing.F) {
	f.Add(uint64(1), uint8(0))
	f.Add(uint64(2), uint8(5))
	f.Add(uint64(3), uint8(14))
	f.Add(uint64(4), uint8(29))
	f.Add(uint64(5), uint8(4))
	f.Add(uint64(6), uint8(39))
	f.Fuzz(func(t *testing.T, seed uint64, variant uint8) {
		r := rand.New(rand.NewPCG(seed, uint64(variant)))
		// cispo is left out: its ratio is a constant by definition, which
		// differences of the loss cannot see.
		types := []string{LossGRPO, LossBNPO, LossDrGRPO, LossDAPO, LossSAPO}
		rest := int(variant) / len(types)
		p := LossParams{
			Type:    types[int(variant)%len(types)],
			Level:   []string{LevelToken, LevelSequence}[rest%2],
			Beta:    []float64{0, 0.3}[rest/2%2],
			Epsilon: 0.2, EpsilonHigh: 0.28, MaxCompletionLength: 9, AccumSteps: 2,
			SAPOTempPos: 1, SAPOTempNeg: 1.05,
		}
		seqs := make([]LossSeq, 1+r.IntN(4))
		grad := make([][]float64, len(seqs))
		for i := range seqs {
			n := r.IntN(5)
			s := LossSeq{Adv: r.NormFloat64()}
			for range n {
				lp := -4 * r.Float64()
				s.LogP = append(s.LogP, lp)
				s.OldLogP = append(s.OldLogP, lp+0.3*r.NormFloat64())
				s.RefLogP = append(s.RefLogP, lp+0.3*r.NormFloat64())
			}
			if rest/4%2 == 1 {
				s.ISWeight = SamplingWeights(CorrectionTokenTruncate, 0, 3, s.OldLogP, perturb(r, s.OldLogP, 0.5))
			}
			seqs[i], grad[i] = s, make([]float64, n)
			p.NumItemsInBatch += n
		}
		if _, err := Loss(p, seqs, grad); err != nil {
			t.Fatal(err)
		}
		nearBound := func(s LossSeq) bool {
			check := func(lr float64) bool {
				rho := math.Exp(lr)
				return math.Abs(rho-(1-p.Epsilon)) < 1e-4 || math.Abs(rho-(1+p.EpsilonHigh)) < 1e-4
			}
			var sum float64
			for k := range s.LogP {
				if check(s.LogP[k] - s.OldLogP[k]) {
					return true
				}
				sum += s.LogP[k] - s.OldLogP[k]
			}
			return len(s.LogP) > 0 && check(sum/float64(len(s.LogP)))
		}
		scratch := make([][]float64, len(seqs))
		for i := range seqs {
			scratch[i] = make([]float64, len(seqs[i].LogP))
		}
		lossAt := func() float64 {
			st, err := Loss(p, seqs, scratch)
			if err != nil {
				t.Fatal(err)
			}
			return st.Loss
		}
		for i, s := range seqs {
			if nearBound(s) {
				continue
			}
			for k := range s.LogP {
				orig := s.LogP[k]
				s.LogP[k] = orig + 1e-6
				lp := lossAt()
				s.LogP[k] = orig - 1e-6
				lm := lossAt()
				s.LogP[k] = orig
				if num := (lp - lm) / 2e-6; math.Abs(num-grad[i][k]) > 1e-6*math.Max(1, math.Abs(num)) {
					t.Fatalf("%+v seq %d token %d: analytic %g numeric %g", p, i, k, grad[i][k], num)
				}
			}
		}
	})
}
