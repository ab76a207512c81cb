package training

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/trainer/chat"
	"github.com/rlhost/rlhost/trainer/grpo"
	"github.com/rlhost/rlhost/trainer/model"
	"github.com/rlhost/rlhost/trainer/tokenizer"
)

// WarmupDir is where a training run saves the model its warm-up made (in
// Hugging Face layout, before the first GRPO step), so that it can be
// evaluated against the trained one.
const WarmupDir = "warmup"

// warmupLine is one transcript of a warm-up file.
type warmupLine struct {
	Messages []core.Message  `json:"messages"`
	Tools    []core.ToolSpec `json:"tools,omitempty"`
}

// LoadWarmup reads a JSONL file of chat transcripts and renders each with
// the chat template; only assistant tokens are trained.
func LoadWarmup(path string, tok *tokenizer.Tokenizer) ([]grpo.Sample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("warmup: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	var out []grpo.Sample
	for n := 1; sc.Scan(); n++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var l warmupLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("warmup: %s:%d: %w", path, n, err)
		}
		ids, mask, err := chat.RenderTokens(tok, l.Messages, l.Tools, false)
		if err != nil {
			return nil, fmt.Errorf("warmup: %s:%d: %w", path, n, err)
		}
		s := grpo.Sample{Tokens: make([]int32, len(ids)), Trained: mask}
		for i, id := range ids {
			s.Tokens[i] = int32(id)
		}
		if len(mask) > 0 {
			mask[0] = false
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("warmup: %s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("warmup: %s holds no transcripts", path)
	}
	return out, nil
}

// RunWarmup fine-tunes m on samples for w.Steps steps of w.BatchSize
// transcripts drawn in a seeded order, with its own optimiser (whose
// state is dropped afterwards: GRPO starts with fresh moments). It
// returns the mean loss of the first and the last tenth of the steps.
//
// In a LoRA run it trains the policy's adapter, or with w.LoRA false every
// weight of the base (which GRPO then keeps frozen under the adapter);
// the base's gradients are freed afterwards.
func RunWarmup(ctx context.Context, m *model.Model, base grpo.Config, w Warmup, samples []grpo.Sample, seed uint64, progress io.Writer) (first, last float64, err error) {
	cfg := base
	cfg.LR, cfg.Schedule, cfg.WarmupSteps, cfg.TotalSteps, cfg.Beta = w.LR, "constant", 0, w.Steps, 0
	cfg.SamplingCorrection = grpo.CorrectionNone // transcripts were not sampled
	if cfg.LoRA != nil && !w.LoRA {
		cfg.LoRA = nil
		defer m.FreeGrads()
	}
	tr, err := grpo.New(m, cfg)
	if err != nil {
		return 0, 0, fmt.Errorf("warmup: %w", err)
	}
	rng := rand.New(rand.NewPCG(seed, 0x7761726d7570))
	order := rng.Perm(len(samples))
	pos := 0
	tenth := max(1, w.Steps/10)
	var firstSum, lastSum float64
	batch := make([]grpo.Sample, 0, w.BatchSize)
	for step := range w.Steps {
		batch = batch[:0]
		for range w.BatchSize {
			if pos == len(order) {
				order, pos = rng.Perm(len(samples)), 0
			}
			batch = append(batch, samples[order[pos]])
			pos++
		}
		st, err := tr.SFTStep(ctx, batch)
		if err != nil {
			return 0, 0, fmt.Errorf("warmup step %d: %w", step+1, err)
		}
		if step < tenth {
			firstSum += st.Loss
		}
		if step >= w.Steps-tenth {
			lastSum += st.Loss
		}
		if progress != nil && ((step+1)%max(1, w.Steps/5) == 0 || step+1 == w.Steps) {
			fmt.Fprintf(progress, "warmup %d/%d  loss %.3f  %s\n", step+1, w.Steps, st.Loss, st.Total.Round(1e6))
		}
	}
	return firstSum / float64(tenth), lastSum / float64(tenth), nil
}
