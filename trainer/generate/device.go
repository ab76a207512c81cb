package generate

import (
	"context"
	"fmt"

	"github.com/rlhost/rlhost/trainer/compute"
	"github.com/rlhost/rlhost/trainer/model"
)

// generateOnDevice is Generate for a device that samples where the logits
// are: each forward's logits stay on the device and only the sampled ids
// and their log-probs come back. Sequence b's i-th token is drawn at
// counter (b, i), so a sequence's tokens do not depend on the batch.
func generateOnDevice(ctx context.Context, ts compute.TokenSampler, m *model.Model, cache *model.Cache, prompts [][]int, o Options, stop map[int]bool) ([]Result, error) {
	be := m.Device()
	B, V := len(prompts), m.Cfg.VocabSize
	s := compute.Sampling{Temperature: float32(o.Temperature), TopK: o.TopK, TopP: float32(o.TopP), Seed: o.Seed}
	ids, logp := be.AllocInts(B), be.Alloc(B)
	stream, step := be.AllocInts(B), be.AllocInts(B)
	hStream, hStep, hIDs, hLogp := make([]int32, B), make([]int32, B), make([]int32, B), make([]float32, B)
	res := make([]Result, B)

	// sample draws the next token of each chunk's slot from lg, which
	// holds one row of logits per chunk, and records it.
	sample := func(chunks []model.Chunk, lg compute.Tensor) error {
		n := len(chunks)
		for i, ch := range chunks {
			hStream[i], hStep[i] = int32(ch.Slot), int32(len(res[ch.Slot].Tokens))
		}
		sv, tv := be.ViewInts(stream, 0, n), be.ViewInts(step, 0, n)
		iv, lv := be.ViewInts(ids, 0, n), be.View(logp, 0, n)
		be.UploadInts(sv, hStream[:n])
		be.UploadInts(tv, hStep[:n])
		ts.SampleTokens(iv, lv, lg, sv, tv, n, V, s)
		ts.DownloadInts(hIDs[:n], iv)
		be.Download(hLogp[:n], lv)
		if err := be.Sync(); err != nil {
			return err
		}
		for i, ch := range chunks {
			r := &res[ch.Slot]
			r.Tokens = append(r.Tokens, int(hIDs[i]))
			r.LogProbs = append(r.LogProbs, hLogp[i])
		}
		return nil
	}

	// Prefill packed up to the cache's row budget, sampling each pass's
	// first tokens before the next pass reuses the logits buffer.
	var chunks []model.Chunk
	rows := 0
	flush := func() error {
		if len(chunks) == 0 {
			return nil
		}
		lg, err := cache.ForwardLogits(chunks)
		if err == nil {
			err = sample(chunks, lg)
		}
		chunks, rows = chunks[:0], 0
		return err
	}
	for b, p := range prompts {
		if rows+len(p) > cache.Rows() {
			if err := flush(); err != nil {
				return nil, fmt.Errorf("generate: prefill: %w", err)
			}
		}
		in := make([]int32, len(p))
		for i, t := range p {
			in[i] = int32(t)
		}
		chunks = append(chunks, model.Chunk{Slot: b, IDs: in})
		rows += len(p)
	}
	if err := flush(); err != nil {
		return nil, fmt.Errorf("generate: prefill: %w", err)
	}
	next := make([]int32, B)
	for step := 0; ; step++ {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("generate: %w", err)
		}
		chunks = chunks[:0]
		for b := range B {
			r := &res[b]
			if r.Finish != "" {
				continue
			}
			tok := r.Tokens[len(r.Tokens)-1]
			switch {
			case stop[tok]:
				r.Finish = FinishStop
			case len(r.Tokens) >= o.MaxTokens:
				r.Finish = FinishLength
			default:
				next[b] = int32(tok)
				chunks = append(chunks, model.Chunk{Slot: b, IDs: next[b : b+1]})
			}
		}
		if len(chunks) == 0 {
			return res, nil
		}
		lg, err := cache.ForwardLogits(chunks)
		if err == nil {
			err = sample(chunks, lg)
		}
		if err != nil {
			return nil, fmt.Errorf("generate: step %d: %w", step, err)
		}
	}
}
