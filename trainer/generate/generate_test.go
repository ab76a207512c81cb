package generate

import (
	"cmp"
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/rlhost/rlhost/trainer/compute/cpu"
	"github.com/rlhost/rlhost/trainer/hfconfig"
	"github.com/rlhost/rlhost/trainer/model"
)

func tinyModel(t *testing.T) *model.Model {
	t.Helper()
	be, err := cpu.New(cpu.Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(be.Close)
	cfg, _ := hfconfig.Preset("tiny")
	m, err := model.New(be, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// A large init std gives peaked, prompt-dependent distributions.
	m.Init(1, 0.5)
	return m
}

// fullForward recomputes the logits of the last position of seq from
// scratch (no cache) and returns them with the log-softmax at temperature T.
func fullForward(t *testing.T, m *model.Model, seq []int, temp float64) ([]float32, []float64) {
	t.Helper()
	r, err := m.NewRun(1, len(seq))
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int32, len(seq))
	for i, v := range seq {
		ids[i] = int32(v)
	}
	if err := r.Forward(ids, []int{len(seq)}); err != nil {
		t.Fatal(err)
	}
	V := m.Cfg.VocabSize
	all := make([]float32, len(seq)*V)
	m.Device().Download(all, r.Logits())
	z := all[(len(seq)-1)*V:]
	mx := math.Inf(-1)
	for _, v := range z {
		mx = math.Max(mx, float64(v)/temp)
	}
	var s float64
	for _, v := range z {
		s += math.Exp(float64(v)/temp - mx)
	}
	lp := make([]float64, V)
	for i, v := range z {
		lp[i] = float64(v)/temp - mx - math.Log(s)
	}
	return z, lp
}

func argmax(z []float32) int {
	best := 0
	for i, v := range z {
		if v > z[best] {
			best = i
		}
	}
	return best
}

func TestGreedyEqualsFullRecomputeArgmax(t *testing.T) {
	m := tinyModel(t)
	prompts := [][]int{{1, 2, 3}, {40, 41}, {7}}
	o := Options{MaxTokens: 8, Temperature: 0}
	res, err := Generate(context.Background(), m, prompts, o)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Generate(context.Background(), m, prompts, o)
	if err != nil {
		t.Fatal(err)
	}
	for b, p := range prompts {
		if !slices.Equal(res[b].Tokens, again[b].Tokens) {
			t.Fatalf("greedy not deterministic: %v vs %v", res[b].Tokens, again[b].Tokens)
		}
		if len(res[b].Tokens) != 8 || res[b].Finish != FinishLength {
			t.Fatalf("seq %d: %d tokens, finish %q", b, len(res[b].Tokens), res[b].Finish)
		}
		seq := slices.Clone(p)
		for i, tok := range res[b].Tokens {
			z, lp := fullForward(t, m, seq, 1)
			if want := argmax(z); tok != want {
				t.Fatalf("seq %d step %d: greedy %d, full-forward argmax %d", b, i, tok, want)
			}
			if math.Abs(float64(res[b].LogProbs[i])-lp[tok]) > 1e-4 {
				t.Fatalf("seq %d step %d: logprob %g, full forward %g", b, i, res[b].LogProbs[i], lp[tok])
			}
			seq = append(seq, tok)
		}
	}
	// The batch holds distinct continuations, so the test is not vacuous.
	if slices.Equal(res[0].Tokens, res[1].Tokens) {
		t.Fatalf("different prompts gave identical continuations %v", res[0].Tokens)
	}
}

func TestSamplingSeededAndLogProbs(t *testing.T) {
	m := tinyModel(t)
	prompts := [][]int{{1, 2, 3}, {1, 2, 3}}
	o := Options{MaxTokens: 10, Temperature: 1.3, TopP: 0.95, TopK: 20, Seed: 99}
	a, err := Generate(context.Background(), m, prompts, o)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Generate(context.Background(), m, prompts, o)
	for i := range a {
		if !slices.Equal(a[i].Tokens, b[i].Tokens) {
			t.Fatal("same seed gave different samples")
		}
	}
	// Sequences draw from their own streams, so equal prompts diverge.
	if slices.Equal(a[0].Tokens, a[1].Tokens) {
		t.Fatalf("two streams sampled the same 10 tokens %v", a[0].Tokens)
	}
	// Sequence 0 does not depend on the rest of the batch.
	solo, _ := Generate(context.Background(), m, prompts[:1], o)
	if !slices.Equal(solo[0].Tokens, a[0].Tokens) {
		t.Fatal("sequence 0 changed with batch composition")
	}
	seq := slices.Clone(prompts[0])
	for i, tok := range a[0].Tokens {
		_, lp := fullForward(t, m, seq, 1.3)
		if math.Abs(float64(a[0].LogProbs[i])-lp[tok]) > 1e-4 {
			t.Fatalf("step %d: logprob %g, full forward %g", i, a[0].LogProbs[i], lp[tok])
		}
		seq = append(seq, tok)
	}
}

func TestStopIDs(t *testing.T) {
	m := tinyModel(t)
	g, err := Generate(context.Background(), m, [][]int{{5, 6}}, Options{MaxTokens: 6})
	if err != nil {
		t.Fatal(err)
	}
	stopAt := g[0].Tokens[2]
	want := slices.Index(g[0].Tokens, stopAt) + 1
	r, err := Generate(context.Background(), m, [][]int{{5, 6}, {9}}, Options{MaxTokens: 6, StopIDs: []int{stopAt}})
	if err != nil {
		t.Fatal(err)
	}
	if r[0].Finish != FinishStop || len(r[0].Tokens) != want || r[0].Tokens[want-1] != stopAt {
		t.Fatalf("got %v finish %q, want stop after %d tokens at id %d", r[0].Tokens, r[0].Finish, want, stopAt)
	}
}

func TestSamplerTruncation(t *testing.T) {
	// probabilities ∝ exp(logits): ids 0..4 with logits 3,2,1,0,-1.
	logits := []float32{3, 2, 1, 0, -1}
	count := func(o Options) []int {
		s := NewSampler(5, o, 0)
		c := make([]int, 5)
		for step := range 4000 {
			tok, lp := s.Sample(logits, step)
			c[tok]++
			// log-prob over the full tempered distribution
			var z float64
			for _, v := range logits {
				z += math.Exp(float64(v) / o.Temperature)
			}
			if want := float64(logits[tok])/o.Temperature - math.Log(z); math.Abs(float64(lp)-want) > 1e-6 {
				t.Fatalf("logprob %g want %g", lp, want)
			}
		}
		return c
	}
	if c := count(Options{Temperature: 1, TopK: 2, Seed: 1}); c[2]+c[3]+c[4] != 0 || c[0] < c[1] || c[1] == 0 {
		t.Fatalf("top-k=2 counts %v", c)
	}
	// p(0) = 0.636, p(0)+p(1) = 0.870: top-p 0.8 keeps ids 0 and 1 only.
	if c := count(Options{Temperature: 1, TopP: 0.8, Seed: 2}); c[2]+c[3]+c[4] != 0 || c[1] == 0 {
		t.Fatalf("top-p=0.8 counts %v", c)
	}
	if c := count(Options{Temperature: 1, TopP: 0.5, Seed: 3}); c[0] != 4000 {
		t.Fatalf("top-p=0.5 counts %v", c)
	}
	// Untruncated: frequencies within 4 standard deviations of p·n.
	c := count(Options{Temperature: 1, Seed: 4})
	var z float64
	for _, v := range logits {
		z += math.Exp(float64(v))
	}
	for i, v := range logits {
		p := math.Exp(float64(v)) / z
		if sd := math.Sqrt(4000 * p * (1 - p)); math.Abs(float64(c[i])-4000*p) > 4*sd+1 {
			t.Fatalf("id %d sampled %d times, expected %.0f±%.0f", i, c[i], 4000*p, sd)
		}
	}
}

func TestGenerateValidation(t *testing.T) {
	m := tinyModel(t)
	ctx := context.Background()
	for _, o := range []Options{{MaxTokens: 0}, {MaxTokens: 2, Temperature: -1}, {MaxTokens: 2, TopP: 2}, {MaxTokens: 500}} {
		if _, err := Generate(ctx, m, [][]int{{1}}, o); err == nil {
			t.Fatalf("want error for %+v", o)
		}
	}
	if _, err := Generate(ctx, m, [][]int{{}}, Options{MaxTokens: 2}); err == nil {
		t.Fatal("want error for empty prompt")
	}
	if _, err := Generate(ctx, m, [][]int{{99}}, Options{MaxTokens: 2}); err == nil {
		t.Fatal("want error for id outside the vocabulary")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := Generate(cctx, m, [][]int{{1}}, Options{MaxTokens: 3}); err == nil {
		t.Fatal("want error for cancelled context")
	}
}

// The histogram cut keeps exactly the set a full sort by probability
// would keep, for top-k, top-p and both, on flat and peaked logits.
func TestTruncationMatchesFullSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const V = 3000
	for trial := range 60 {
		scale := []float64{0.01, 1, 5, 30}[trial%4]
		logits := make([]float32, V)
		for i := range logits {
			logits[i] = float32(rng.NormFloat64() * scale)
		}
		if trial%5 == 0 { // ties
			for i := 0; i < V; i += 3 {
				logits[i] = logits[0]
			}
		}
		o := Options{Temperature: 1, TopK: []int{0, 1, 7, 500}[trial%4], TopP: []float64{0, 0.3, 0.9, 0.999}[(trial/4)%4]}
		if o.TopK == 0 && o.TopP == 0 {
			continue // no cut to check
		}
		s := NewSampler(V, o, 0)
		s.Sample(logits, trial)
		// Reference: sort everything, then cut as the definition says.
		ref := make([]int, V)
		for i := range ref {
			ref[i] = i
		}
		slices.SortFunc(ref, func(a, b int) int {
			return cmp.Or(cmp.Compare(s.probs[b], s.probs[a]), cmp.Compare(a, b))
		})
		if o.TopK > 0 {
			ref = ref[:o.TopK]
		}
		var kept float64
		for _, i := range ref {
			kept += s.probs[i]
		}
		if o.TopP > 0 {
			var acc float64
			for n, i := range ref {
				acc += s.probs[i]
				if acc >= o.TopP*kept {
					ref = ref[:n+1]
					break
				}
			}
		}
		cand := make([]int, V)
		for i := range cand {
			cand[i] = i
		}
		total := math.Inf(1)
		if o.TopK > 0 {
			cand, total = s.prefix(cand, o.TopK, total)
		} else {
			total = 0
			for _, p := range s.probs {
				total += p
			}
		}
		if o.TopP > 0 {
			cand, _ = s.prefix(cand, len(cand), o.TopP*total)
		}
		got := slices.Sorted(slices.Values(cand))
		want := slices.Sorted(slices.Values(ref))
		// Summation order differs, so a cut exactly on a rounding edge may
		// move by one token; anything more is a bug.
		if d := len(got) - len(want); d < -1 || d > 1 || !subset(got, want) && !subset(want, got) {
			t.Fatalf("trial %d (%+v): kept %d tokens, full sort keeps %d (or a different set)", trial, o, len(got), len(want))
		}
	}
}

func subset(a, b []int) bool {
	for _, x := range a {
		if _, ok := slices.BinarySearch(b, x); !ok {
			return false
		}
	}
	return true
}

// Philox4x32-10's known-answer vectors (Random123's kat_vectors): the
// sampler's generator is the published one, as the CUDA kernel's is.
func TestPhiloxKnownAnswers(t *testing.T) {
	for _, tc := range []struct {
		c      [4]uint32
		k0, k1 uint32
		want   [4]uint32
	}{
		{[4]uint32{0, 0, 0, 0}, 0, 0, [4]uint32{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
		{[4]uint32{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, 0xffffffff, 0xffffffff, [4]uint32{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
		{[4]uint32{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, 0xa4093822, 0x299f31d0, [4]uint32{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
	} {
		if got := philox(tc.c, tc.k0, tc.k1); got != tc.want {
			t.Errorf("philox(%x, %x %x) = %x, want %x", tc.c, tc.k0, tc.k1, got, tc.want)
		}
	}
}

// A draw is a function of (seed, stream, step) alone: taking the steps in
// another order, on another sampler, gives the same tokens.
func TestSamplerDrawDependsOnStepOnly(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	const V = 5000
	rows := make([][]float32, 40)
	for i := range rows {
		rows[i] = make([]float32, V)
		for j := range rows[i] {
			rows[i][j] = float32(r.NormFloat64() * 3)
		}
	}
	for _, o := range []Options{{Temperature: 1, Seed: 7}, {Temperature: 0.7, TopK: 50, Seed: 7}, {Temperature: 1.2, TopP: 0.9, Seed: 7}} {
		fwd, back := NewSampler(V, o, 3), NewSampler(V, o, 3)
		want := make([]int, len(rows))
		for i, row := range rows {
			want[i], _ = fwd.Sample(row, i)
		}
		other := NewSampler(V, o, 4)
		same := 0
		for i := len(rows) - 1; i >= 0; i-- {
			if got, _ := back.Sample(rows[i], i); got != want[i] {
				t.Fatalf("%+v: step %d drew %d in reverse order, %d in order", o, i, got, want[i])
			}
			if got, _ := other.Sample(rows[i], i); got == want[i] {
				same++
			}
		}
		if same == len(rows) {
			t.Fatalf("%+v: streams 3 and 4 drew the same %d tokens", o, len(rows))
		}
	}
}

// A sequence's tokens and log-probs do not depend, bit for bit, on the
// batch it is generated in: alone (batch 1) or among 15 others, whatever
// their prompts and lengths, with the sampler's every path.
func TestGenerateBatchInvariant(t *testing.T) {
	be, err := cpu.New(cpu.Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(be.Close)
	cfg, _ := hfconfig.Preset("1m")
	m, err := model.New(be, cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.Init(3, 0.2)
	r := rand.New(rand.NewPCG(9, 9))
	batch := func(first []int) [][]int {
		ps := [][]int{first}
		for len(ps) < 16 {
			p := make([]int, 1+r.IntN(40))
			for i := range p {
				p[i] = r.IntN(cfg.VocabSize)
			}
			ps = append(ps, p)
		}
		return ps
	}
	prompt := []int{5, 17, 99, 3, 250, 8, 8, 41, 77, 12, 300}
	for _, o := range []Options{
		{MaxTokens: 24, Temperature: 0},
		{MaxTokens: 24, Temperature: 1, Seed: 11},
		{MaxTokens: 24, Temperature: 0.8, TopK: 40, TopP: 0.95, Seed: 12},
	} {
		solo, err := Generate(context.Background(), m, [][]int{prompt}, o)
		if err != nil {
			t.Fatal(err)
		}
		for trial := range 2 {
			res, err := Generate(context.Background(), m, batch(prompt), o)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res[0].Tokens, solo[0].Tokens) || !slices.EqualFunc(res[0].LogProbs, solo[0].LogProbs, func(a, b float32) bool {
				return math.Float32bits(a) == math.Float32bits(b)
			}) {
				t.Fatalf("%+v, batch %d: in a batch of 16 %v %v, alone %v %v", o, trial, res[0].Tokens, res[0].LogProbs, solo[0].Tokens, solo[0].LogProbs)
			}
		}
	}
}

// Logits a diverged model might produce (NaN, ±Inf) give a token in the
// vocabulary, never a panic.
func TestSamplerSurvivesNonFiniteLogits(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, row := range [][]float32{
		{nan, nan, nan},
		{1, nan, 2},
		{-inf, -inf, 0},
		{inf, 1, 2},
		slices.Repeat([]float32{nan}, 100),
	} {
		for _, o := range []Options{{}, {Temperature: 1, Seed: 1}, {Temperature: 1, TopK: 2, Seed: 1}, {Temperature: 1, TopP: 0.5, Seed: 1}} {
			tok, _ := NewSampler(len(row), o, 0).Sample(row, 0)
			if tok < 0 || tok >= len(row) {
				t.Fatalf("%v with %+v: token %d", row, o, tok)
			}
		}
	}
}
