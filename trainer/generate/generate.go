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
	"slices"

	"github.com/rlhost/rlhost/trainer/compute"
	"github.com/rlhost/rlhost/trainer/compute/cpu"
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
	// Seed makes sampling reproducible: token i of sequence b is drawn
	// with the uniform Philox4x32-10 gives for key Seed at counter (i, 0,
	// b, 0), on the host as on a device that samples where the logits are
	// (compute.TokenSampler), so a sequence's tokens do not depend on what
	// else is in the batch.
	Seed uint64
}

// prefillRows bounds the prompt rows of one prefill pass (its activation
// scratch is about 21k floats a row at the 0.5B dimensions).
const prefillRows = 1024

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
	// Scratch for every prompt in one prefill pass, up to prefillRows: a
	// pass reads every weight once, so fewer, fuller passes cost less.
	total := 0
	for _, p := range prompts {
		total += len(p)
	}
	cache, err := m.NewPackedCache(B, maxT, max(B, maxT, min(total, prefillRows)))
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
			tok, lp := samplers[b].Sample(logits[r*V:(r+1)*V], len(res[b].Tokens))
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

// Sampler draws tokens from logits with one sequence's options. Its draws
// come from a counter-based generator (Philox4x32-10, as the CUDA
// backend's sampler uses): the uniform for a token is a function of the
// seed, the sampler's stream and the step Sample is given, never of what
// was drawn before or by other sequences, so a sequence's tokens do not
// depend on the order or company it is sampled in. Its scratch is sized
// once for the vocabulary. Without top-k or top-p one vectorised pass
// computes the probabilities (block by block, each block's mass kept) and
// the draw walks the blocks; top-k and top-p never sort the vocabulary:
// a histogram of the probabilities over log-spaced buckets finds the
// bucket where the cut falls, and only that bucket's members are sorted.
type Sampler struct {
	o      Options
	stream uint32
	e      []float32 // exp(a·logit − b) per id, of the last Sample
	blocks []float64 // Σe per sampleBlock ids
	probs  []float64 // e as float64, for top-k and top-p
	idx    []int
	tmp    []int
	hist   []bucket
	// a = 1/T and lse of the last Sample, for TopLogProbs: an id's
	// log-prob is a·logit − lse.
	a, lse float64
}

// sampleBlock is how many ids share one block mass for the draw's walk.
const sampleBlock = 2048

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

// NewSampler returns the sampler for one stream of draws under o.Seed
// (generation uses a sequence's index in its batch, the server a choice's
// index in its request).
func NewSampler(vocab int, o Options, stream uint64) *Sampler {
	return &Sampler{o: o, stream: uint32(stream), e: make([]float32, vocab),
		blocks: make([]float64, (vocab+sampleBlock-1)/sampleBlock)}
}

// Reset gives the sampler new options and stream, keeping its scratch, so
// a server reuses one sampler per slot.
func (s *Sampler) Reset(o Options, stream uint64) {
	s.o, s.stream = o, uint32(stream)
}

// Sample returns the token drawn at step (a sequence's token index, or any
// count that differs between its draws) and its log-prob (see
// Result.LogProbs).
func (s *Sampler) Sample(logits []float32, step int) (int, float32) {
	T := s.o.Temperature
	greedy := T == 0
	if greedy {
		T = 1
	}
	mx := cpu.MaxFloat32(logits)
	a := float32(1 / T)
	b := a * mx // T > 0: the largest logit is the largest a·logit
	var total float64
	for k := range s.blocks {
		lo, hi := k*sampleBlock, min((k+1)*sampleBlock, len(logits))
		s.blocks[k] = cpu.ExpSum(s.e[lo:hi], logits[lo:hi], a, b)
		total += s.blocks[k]
	}
	s.a = float64(a)
	s.lse = float64(b) + math.Log(total)
	logp := func(i int) float32 { return float32(s.a*float64(logits[i]) - s.lse) }
	if greedy {
		arg := 0 // the lowest id holding the maximum (NaN logits: the last id)
		for arg < len(logits)-1 && logits[arg] != mx {
			arg++
		}
		return arg, logp(arg)
	}
	u := uniform53(s.o.Seed, s.stream, uint32(step))
	k, p := s.o.TopK, s.o.TopP
	if (k <= 0 || k >= len(logits)) && (p <= 0 || p >= 1) {
		i := s.walk(u * total)
		return i, logp(i)
	}
	if len(s.probs) < len(logits) {
		s.probs = make([]float64, len(logits))
		s.hist = make([]bucket, numBuckets)
	}
	cand := s.idx[:0]
	for i, e := range s.e[:len(logits)] {
		s.probs[i] = float64(e)
		cand = append(cand, i)
	}
	if k > 0 && k < len(cand) {
		cand, total = s.prefix(cand, k, math.Inf(1))
	}
	if p > 0 && p < 1 {
		cand, total = s.prefix(cand, len(cand), p*total)
	}
	s.idx = cand[:0]
	x := u * total
	for _, i := range cand {
		x -= s.probs[i]
		if x < 0 {
			return i, logp(i)
		}
	}
	last := cand[len(cand)-1] // x landed on the rounding edge
	return last, logp(last)
}

// walk returns the id where the running mass, in id order, first exceeds
// x: whole blocks by their mass, then ids one by one.
func (s *Sampler) walk(x float64) int {
	k := 0
	for k < len(s.blocks)-1 && x >= s.blocks[k] {
		x -= s.blocks[k]
		k++
	}
	lo, hi := k*sampleBlock, min((k+1)*sampleBlock, len(s.e))
	last := lo
	for i := lo; i < hi; i++ {
		if s.e[i] > 0 {
			last = i
		}
		x -= float64(s.e[i])
		if x < 0 {
			return i
		}
	}
	return last // x landed on the rounding edge of the block
}

// uniform53 is Philox4x32-10 keyed by seed at counter (step, 0, stream, 0),
// its first two words' top 53 bits as a float64 in [0,1): the draw the
// CUDA backend's sampler makes for the same triple.
func uniform53(seed uint64, stream, step uint32) float64 {
	c := philox([4]uint32{step, 0, stream, 0}, uint32(seed), uint32(seed>>32))
	return float64(uint64(c[0])<<21|uint64(c[1]>>11)) / (1 << 53)
}

// philox is Philox4x32-10 (Salmon et al., SC'11): ten rounds of a keyed
// bijection on a 128-bit counter.
func philox(c [4]uint32, k0, k1 uint32) [4]uint32 {
	for range 10 {
		p0, p1 := uint64(0xD2511F53)*uint64(c[0]), uint64(0xCD9E8D57)*uint64(c[2])
		c = [4]uint32{uint32(p1>>32) ^ c[1] ^ k0, uint32(p1), uint32(p0>>32) ^ c[3] ^ k1, uint32(p0)}
		k0 += 0x9E3779B9
		k1 += 0xBB67AE85
	}
	return c
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
		out[k] = TokenLogProb{ID: i, LogProb: float32(s.a*float64(logits[i]) - s.lse)}
	}
	return out
}
