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
	// Seed makes sampling reproducible: sequence b draws from PCG(Seed, b),
	// so its tokens do not depend on what else is in the batch.
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
	logits := make([]float32, B*V)
	for b, p := range prompts {
		ids := make([]int32, len(p))
		for i, t := range p {
			ids[i] = int32(t)
		}
		if err := cache.Prefill(b, ids, logits[b*V:(b+1)*V]); err != nil {
			return nil, fmt.Errorf("generate: prompt %d: %w", b, err)
		}
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
		active := 0
		for b := range B {
			if res[b].Finish != "" {
				next[b] = 0 // keeps the batch shape; the result is discarded
				continue
			}
			tok, lp := samplers[b].Sample(logits[b*V : (b+1)*V])
			res[b].Tokens = append(res[b].Tokens, tok)
			res[b].LogProbs = append(res[b].LogProbs, lp)
			next[b] = int32(tok)
			switch {
			case stop[tok]:
				res[b].Finish = FinishStop
			case len(res[b].Tokens) >= o.MaxTokens:
				res[b].Finish = FinishLength
			default:
				active++
			}
		}
		if active == 0 {
			return res, nil
		}
		if err := cache.Decode(next, logits); err != nil {
			return nil, fmt.Errorf("generate: step %d: %w", step, err)
		}
	}
}

// Sampler draws tokens from logits with one sequence's options and RNG.
// Its scratch is sized once for the vocabulary.
type Sampler struct {
	o     Options
	rng   *rand.Rand
	probs []float64
	idx   []int
}

// NewSampler returns the sampler for sequence stream of a batch.
func NewSampler(vocab int, o Options, stream uint64) *Sampler {
	return &Sampler{o: o, rng: rand.New(rand.NewPCG(o.Seed, stream)),
		probs: make([]float64, vocab), idx: make([]int, vocab)}
}

// Sample returns the next token and its log-prob (see Result.LogProbs).
func (s *Sampler) Sample(logits []float32) (int, float32) {
	T := s.o.Temperature
	greedy := T == 0
	if greedy {
		T = 1
	}
	mx := math.Inf(-1)
	arg := 0
	for i, z := range logits {
		if v := float64(z) / T; v > mx {
			mx, arg = v, i
		}
	}
	var sum float64
	for i, z := range logits {
		p := math.Exp(float64(z)/T - mx)
		s.probs[i] = p
		sum += p
	}
	lse := mx + math.Log(sum)
	logp := func(i int) float32 { return float32(float64(logits[i])/T - lse) }
	if greedy {
		return arg, logp(arg)
	}
	cand := s.idx[:0]
	for i := range logits {
		cand = append(cand, i)
	}
	if k := s.o.TopK; (k > 0 && k < len(cand)) || (s.o.TopP > 0 && s.o.TopP < 1) {
		// Highest probability first; ties by id for determinism.
		slices.SortFunc(cand, func(a, b int) int {
			return cmp.Or(cmp.Compare(s.probs[b], s.probs[a]), cmp.Compare(a, b))
		})
		if k > 0 && k < len(cand) {
			cand = cand[:k]
		}
		if p := s.o.TopP; p > 0 && p < 1 {
			var kept, acc float64
			for _, i := range cand {
				kept += s.probs[i]
			}
			n := 0
			for n < len(cand) {
				acc += s.probs[cand[n]]
				n++
				if acc >= p*kept {
					break
				}
			}
			cand = cand[:n]
		}
	}
	var total float64
	for _, i := range cand {
		total += s.probs[i]
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
