// Package generate samples continuations from a model with its KV cache:
// batched prompts, temperature, top-k, top-p, a token budget and stop ids,
// with a seeded random generator per sequence and the log-prob of every
// sampled token returned alongside it.
//
// It deliberately works on token ids only (no tokenizer, no chat
// template) and does no continuous batching: a batch runs until every
// sequence has stopped or reached MaxTokens.
package generate

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/rlhost/rlhost/trainer/compute"
	"github.com/rlhost/rlhost/trainer/model"
)

// Options control sampling.
type Options struct {
	MaxTokens int
	// Temperature scales logits (logits/T). 0 means greedy argmax.
	Temperature float64
	// TopP keeps the smallest set of most likely tokens whose probability
	// reaches TopP; 0 or 1 disables it.
	TopP float64
	// TopK keeps the K most likely tokens; 0 disables it.
	TopK int
	// StopIDs end a sequence when sampled (the stop token is kept in the
	// output, since a policy must learn to emit it).
	StopIDs []int
	// Seed makes sampling reproducible: sequence b draws from PCG(Seed, b)
	// on the host, or, on a device that samples where the logits are
	// (compute.TokenSampler), from Philox keyed by Seed at counter (b, token
	// index); either way its tokens do not depend on what else is in the
	// batch. The two streams differ, so a seed draws different (equally
	// distributed) tokens on the CPU and on a GPU.
	Seed uint64
}

// Finish reasons.
const (
	FinishStop   = "stop"
	FinishLength = "length"
)

// Result is one sequence's continuation.
type Result struct {
	Tokens []int
	// LogProbs[i] is log softmax(logits/T)[Tokens[i]] over the full
	// vocabulary (before top-k/top-p truncation), the quantity
	// model.Run.LogProbs computes at the same temperature; with T=0 it is
	// taken at T=1.
	LogProbs []float32
	Finish   string
}

// Generate continues each prompt.
func Generate(ctx context.Context, m *model.Model, prompts [][]int, o Options) ([]Result, error) {
	if len(prompts) == 0 {
		return nil, nil
	}
	if o.MaxTokens <= 0 {
		return nil, fmt.Errorf("generate: max tokens %d must be positive", o.MaxTokens)
	}
	if o.Temperature < 0 || math.IsNaN(o.Temperature) || o.TopP < 0 || o.TopP > 1 || o.TopK < 0 {
		return nil, fmt.Errorf("generate: invalid sampling options temperature=%g top_p=%g top_k=%d", o.Temperature, o.TopP, o.TopK)
	}
	B, V := len(prompts), m.Cfg.VocabSize
	longest := 0
	for b, p := range prompts {
		if len(p) == 0 {
			return nil, fmt.Errorf("generate: prompt %d is empty", b)
		}
		longest = max(longest, len(p))
	}
	maxT := longest + o.MaxTokens
	if m.Cfg.MaxPositions > 0 && maxT > m.Cfg.MaxPositions {
		return nil, fmt.Errorf("generate: prompt of %d plus %d new tokens exceeds max_position_embeddings %d", longest, o.MaxTokens, m.Cfg.MaxPositions)
	}
	cache, err := m.NewCache(B, maxT)
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	stop := map[int]bool{}
	for _, s := range o.StopIDs {
		stop[s] = true
	}
	if ts, ok := m.Device().(compute.TokenSampler); ok {
		return generateOnDevice(ctx, ts, m, cache, prompts, o, stop)
	}
	// Prompts are prefilled together, packed up to the cache's row budget
	// per pass; logits[i*V:] belongs to the sequence in row[i].
	logits := make([]float32, B*V)
	row := make([]int, B)
	var chunks []model.Chunk
	rows, first := 0, 0
	flush := func() error {
		if len(chunks) == 0 {
			return nil
		}
		err := cache.Forward(chunks, logits[first*V:(first+len(chunks))*V])
		chunks, rows = chunks[:0], 0
		return err
	}
	for b, p := range prompts {
		if rows+len(p) > cache.Rows() {
			if err := flush(); err != nil {
				return nil, fmt.Errorf("generate: prefill: %w", err)
			}
			first = b
		}
		ids := make([]int32, len(p))
		for i, t := range p {
			ids[i] = int32(t)
		}
		chunks = append(chunks, model.Chunk{Slot: b, IDs: ids})
		rows += len(p)
		row[b] = b
	}
	if err := flush(); err != nil {
		return nil, fmt.Errorf("generate: prefill: %w", err)
	}
	res := make([]Result, B)
	samplers := make([]*Sampler, B)
	for b := range B {
		samplers[b] = NewSampler(V, o, uint64(b))
	}
	next := make([]int32, B)
	for step := 0; ; step++ {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("generate: %w", err)
		}
		chunks = chunks[:0]
		for b := range B {
			if res[b].Finish != "" {
				continue
			}
			r := row[b]
			tok, lp := samplers[b].Sample(logits[r*V : (r+1)*V])
			res[b].Tokens = append(res[b].Tokens, tok)
			res[b].LogProbs = append(res[b].LogProbs, lp)
			switch {
			case stop[tok]:
				res[b].Finish = FinishStop
			case len(res[b].Tokens) >= o.MaxTokens:
				res[b].Finish = FinishLength
			default:
				// Only unfinished sequences are decoded.
				next[b] = int32(tok)
				row[b] = len(chunks)
				chunks = append(chunks, model.Chunk{Slot: b, IDs: next[b : b+1]})
			}
		}
		if len(chunks) == 0 {
			return res, nil
		}
		if err := cache.Forward(chunks, logits[:len(chunks)*V]); err != nil {
			return nil, fmt.Errorf("generate: step %d: %w", step, err)
		}
	}
}

// Sampler draws tokens from logits with one sequence's options and RNG.
// Its scratch is sized once for the vocabulary. Top-k and top-p never sort
// the vocabulary: a histogram of the probabilities over log-spaced buckets
// finds the bucket where the cut falls, and only that bucket's members
// are sorted.
type Sampler struct {
	o     Options
	rng   *rand.Rand
	probs []float64
	idx   []int
	tmp   []int
	hist  []bucket
	// lse and 1/T of the last Sample, for TopLogProbs.
	lse, inv float64
}

type bucket struct {
	n    int
	mass float64
}

// Buckets are keyed by the top bits of a probability's float64 encoding
// (exponent and 5 mantissa bits), so the key falls as the probability
// falls and one bucket spans a ratio of at most 1+1/32. Probabilities
// below 2^-80 share the last bucket.
const (
	bucketShift = 52 - 5
	numBuckets  = 80 << 5
)

var oneKey = math.Float64bits(1) >> bucketShift

func bucketOf(p float64) int {
	k := int(oneKey - math.Float64bits(p)>>bucketShift)
	return min(max(k, 0), numBuckets-1)
}

// NewSampler returns the sampler for sequence stream of a batch.
func NewSampler(vocab int, o Options, stream uint64) *Sampler {
	return &Sampler{o: o, rng: rand.New(rand.NewPCG(o.Seed, stream)),
		probs: make([]float64, vocab), idx: make([]int, 0, vocab), hist: make([]bucket, numBuckets)}
}

// Reset gives the sampler new options and a fresh stream, keeping its
// scratch, so a server reuses one sampler per slot.
func (s *Sampler) Reset(o Options, stream uint64) {
	s.o = o
	s.rng = rand.New(rand.NewPCG(o.Seed, stream))
}

// Sample returns the next token and its log-prob (see Result.LogProbs).
func (s *Sampler) Sample(logits []float32) (int, float32) {
	T := s.o.Temperature
	greedy := T == 0
	if greedy {
		T = 1
	}
	// T > 0, so the largest logit is the largest logit/T.
	arg := 0
	for i, z := range logits {
		if z > logits[arg] {
			arg = i
		}
	}
	inv := 1 / T
	mx := float64(logits[arg]) * inv
	var sum float64
	for i, z := range logits {
		p := expNonPos(float64(z)*inv - mx)
		s.probs[i] = p
		sum += p
	}
	lse := mx + math.Log(sum)
	s.lse, s.inv = lse, inv
	logp := func(i int) float32 { return float32(float64(logits[i])*inv - lse) }
	if greedy {
		return arg, logp(arg)
	}
	cand := s.idx[:0]
	for i := range logits {
		cand = append(cand, i)
	}
	total := sum
	if k := s.o.TopK; k > 0 && k < len(cand) {
		cand, total = s.prefix(cand, k, math.Inf(1))
	}
	if p := s.o.TopP; p > 0 && p < 1 {
		cand, total = s.prefix(cand, len(cand), p*total)
	}
	u := s.rng.Float64() * total
	for _, i := range cand {
		u -= s.probs[i]
		if u < 0 {
			return i, logp(i)
		}
	}
	last := cand[len(cand)-1] // u landed on the rounding edge
	return last, logp(last)
}

// prefix returns the members of cand that open its order by falling
// probability (ties by id) up to the first of: count members, or a
// running mass reaching mass; and their total mass. Whole buckets above
// the cut keep their id order (the draw does not care); only the bucket
// holding the cut is sorted. cand is reordered in place.
func (s *Sampler) prefix(cand []int, count int, mass float64) ([]int, float64) {
	clear(s.hist)
	for _, i := range cand {
		h := &s.hist[bucketOf(s.probs[i])]
		h.n++
		h.mass += s.probs[i]
	}
	n, acc, cut := 0, 0.0, numBuckets-1
	for b := range s.hist {
		h := s.hist[b]
		if n+h.n >= count || acc+h.mass >= mass {
			cut = b
			break
		}
		n += h.n
		acc += h.mass
	}
	// Stable partition: buckets above the cut, then the cut bucket.
	out, edge := cand[:0], s.tmp[:0]
	for _, i := range cand {
		switch b := bucketOf(s.probs[i]); {
		case b < cut:
			out = append(out, i)
		case b == cut:
			edge = append(edge, i)
		}
	}
	s.tmp = edge[:0]
	slices.SortFunc(edge, func(a, b int) int {
		return cmp.Or(cmp.Compare(s.probs[b], s.probs[a]), cmp.Compare(a, b))
	})
	for _, i := range edge {
		if len(out) >= count {
			break
		}
		out = append(out, i)
		acc += s.probs[i]
		if acc >= mass {
			break
		}
	}
	return out, acc
}

// expNonPos is e^x for x <= 0 to a relative error below 1e-11, about
// 1.6 times faster than math.Exp: sampling evaluates it once per
// vocabulary entry per token, so it bounds how batching scales.
func expNonPos(x float64) float64 {
	const (
		log2e = 1.4426950408889634
		ln2hi = 6.93147180369123816490e-01
		ln2lo = 1.90821492927058770002e-10
	)
	if !(x >= -708) { // also NaN and -Inf
		return 0
	}
	k := math.Floor(x*log2e + 0.5)
	r := x - k*ln2hi - k*ln2lo // |r| <= ln2/2: a degree-9 Taylor series suffices
	p := 1 + r*(1+r*(1.0/2+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720+r*(1.0/5040+r*(1.0/40320+r*(1.0/362880)))))))))
	return p * math.Float64frombits(uint64(int64(k)+1023)<<52)
}

// TokenLogProb is one token with its log-prob.
type TokenLogProb struct {
	ID      int
	LogProb float32
}

// TopLogProbs returns the n most likely tokens of the logits last passed
// to Sample (ties by id) with their log-probs at the sampling temperature
// (T=1 when greedy), most likely first.
func (s *Sampler) TopLogProbs(logits []float32, n int) []TokenLogProb {
	n = min(n, len(logits))
	top := make([]int, 0, n+1)
	for i, z := range logits {
		if len(top) == n && z <= logits[top[n-1]] {
			continue
		}
		j := len(top)
		for j > 0 && logits[top[j-1]] < z {
			j--
		}
		top = slices.Insert(top, j, i)
		if len(top) > n {
			top = top[:n]
		}
	}
	out := make([]TokenLogProb, len(top))
	for k, i := range top {
		out[k] = TokenLogProb{ID: i, LogProb: float32(float64(logits[i])*s.inv - s.lse)}
	}
	return out
}
