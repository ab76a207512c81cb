package grpo

import (
	"context"
	"math"
	"testing"

	"github.com/rlhost/rlhost/trainer/generate"
	"github.com/rlhost/rlhost/trainer/model"
)

// TestLearnsToEmitPromptedToken is GRPO end to end in one process: a
// tiny random model with a 32-token vocabulary samples completions with
// trainer/generate, a Go reward scores them, and Step updates the policy.
// The task: after prompt token p (1..4) emit token p+10; the reward is
// the fraction of the 4 completion tokens that are. A random policy
// scores ~1/32. Everything is seeded; nothing is timed.
func TestLearnsToEmitPromptedToken(t *testing.T) {
	cfg := DefaultConfig()
	cfg.LR, cfg.MaxSeqLen, cfg.MicroBatch, cfg.MaxCompletionLength = 3e-2, 8, 16, 4
	// The sampler is this model, so the correction's weights are ~1; it
	// runs here to show it does not get in the way.
	cfg.SamplingCorrection = CorrectionSequenceMask
	learnPromptedToken(t, cfg, 0.3)
}

// TestLoRALearnsToEmitPromptedToken is the same task training only a
// LoRA adapter: generation samples from base + adapter (the sampled and
// recomputed log-probs agree), and the frozen base does not move.
func TestLoRALearnsToEmitPromptedToken(t *testing.T) {
	cfg := DefaultConfig()
	cfg.LR, cfg.MaxSeqLen, cfg.MicroBatch, cfg.MaxCompletionLength = 3e-2, 8, 16, 4
	cfg.LoRA = &LoRA{AdapterConfig: model.AdapterConfig{Rank: 4, Alpha: 8, Targets: model.Modules()}, Seed: 1}
	// Without the embeddings and head, this 16-wide model learns the task
	// more slowly in 30 steps; a broken adapter path stays near 1/32.
	learnPromptedToken(t, cfg, 0.2)
}

func learnPromptedToken(t *testing.T, cfg Config, minRise float64) {
	t.Helper()
	be := backend32(t)
	m := tinyModel(t, be, 32, 11)
	base := weights(m)
	tr, err := New(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	const steps, prompts, group = 30, 4, 8
	var rewards []float64
	for step := range steps {
		var ps [][]int
		for p := 1; p <= prompts; p++ {
			for range group {
				ps = append(ps, []int{0, p})
			}
		}
		res, err := generate.Generate(context.Background(), m, ps, generate.Options{
			MaxTokens: 4, Temperature: cfg.Temperature, Seed: uint64(1000 + step)})
		if err != nil {
			t.Fatal(err)
		}
		groups := make([][]Sample, prompts)
		var mean float64
		for i, r := range res {
			p := ps[i][1]
			s := Sample{Tokens: []int32{0, int32(p)}, Trained: []bool{false, false}, SampleLogProbs: []float32{0, 0},
				Truncated: r.Finish == generate.FinishLength}
			hits := 0
			for k, tok := range r.Tokens {
				s.Tokens = append(s.Tokens, int32(tok))
				s.Trained = append(s.Trained, true)
				s.SampleLogProbs = append(s.SampleLogProbs, r.LogProbs[k])
				if tok == p+10 {
					hits++
				}
			}
			s.Reward = float64(hits) / float64(len(r.Tokens))
			mean += s.Reward / float64(len(res))
			groups[p-1] = append(groups[p-1], s)
		}
		st, err := tr.Step(context.Background(), groups)
		if err != nil {
			t.Fatal(err)
		}
		if st.Skipped != "" {
			t.Fatalf("step %d skipped: %s", step, st.Skipped)
		}
		// The sampler's log-probs and the trainer's are the same quantity
		// (log softmax(logits/T) of the sampled token) from two code paths.
		if st.SampleLogProbDiff > 1e-4 {
			t.Fatalf("step %d: sampled vs recomputed log-probs differ by %g on average", step, st.SampleLogProbDiff)
		}
		rewards = append(rewards, mean)
		t.Logf("step %2d reward %.3f loss %+.4f grad %.3f zero-std %d", step, mean, st.Loss, st.GradNorm, st.ZeroStdGroups)
	}
	first, last := avg(rewards[:steps/5]), avg(rewards[steps-steps/5:])
	t.Logf("mean reward: first %d steps %.3f, last %d steps %.3f", steps/5, first, steps/5, last)
	if last < first+minRise {
		t.Fatalf("reward did not rise: first %.3f, last %.3f", first, last)
	}
	if cfg.LoRA != nil {
		for i, w := range weights(m) {
			p := m.Params()[i]
			if p.G != nil {
				t.Fatalf("frozen base parameter %s has a gradient", p.Name)
			}
			for j := range w {
				if math.Float32bits(w[j]) != math.Float32bits(base[i][j]) {
					t.Fatalf("frozen base parameter %s[%d] moved", p.Name, j)
				}
			}
		}
	}
}

func avg(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// TestSampleRatioStats shifts the sampler's log-probs by known amounts:
// log 2 below the trainer's gives a ratio of exactly 2 on every token,
// log 4 a ratio of 4, which clip_max 3 counts as clipped.
func TestSampleRatioStats(t *testing.T) {
	for _, tc := range []struct {
		shift         float64
		mean, clipped float64
	}{{0, 1, 0}, {math.Log(2), 2, 0}, {math.Log(4), 4, 1}} {
		be := backend32(t)
		m := tinyModel(t, be, 32, 11)
		cfg := DefaultConfig()
		cfg.MaxSeqLen, cfg.MicroBatch, cfg.MaxCompletionLength = 8, 16, 4
		tr, err := New(m, cfg)
		if err != nil {
			t.Fatal(err)
		}
		ps := [][]int{{0, 1}, {0, 1}}
		res, err := generate.Generate(context.Background(), m, ps, generate.Options{MaxTokens: 4, Temperature: cfg.Temperature, Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		var group []Sample
		for i, r := range res {
			s := Sample{Tokens: []int32{0, 1}, Trained: []bool{false, false}, SampleLogProbs: []float32{0, 0}, Reward: float64(i)}
			for k, tok := range r.Tokens {
				s.Tokens = append(s.Tokens, int32(tok))
				s.Trained = append(s.Trained, true)
				s.SampleLogProbs = append(s.SampleLogProbs, r.LogProbs[k]-float32(tc.shift))
			}
			group = append(group, s)
		}
		st, err := tr.Step(context.Background(), [][]Sample{group})
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(st.SampleRatioMean-tc.mean) > 1e-3*tc.mean || math.Abs(st.SampleRatioMax-tc.mean) > 1e-3*tc.mean || st.SampleRatioClipped != tc.clipped {
			t.Errorf("shift %.3f: ratio mean %g max %g clipped %g, want %g, %g, %g", tc.shift, st.SampleRatioMean, st.SampleRatioMax, st.SampleRatioClipped, tc.mean, tc.mean, tc.clipped)
		}
	}
}
