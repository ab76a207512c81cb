package training

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/host/runner"
	"github.com/rlhost/rlhost/trainer/grpo"
)

// A step in which every group's rewards are equal has no policy gradient.
// With beta 0 the sink applies no update (AdamW would only replay its
// momentum); with beta > 0 the KL term to the reference has a gradient
// once the policy has moved, and the step runs, as TRL's does.
func TestSinkStepsOnKLWhenRewardsAreEqual(t *testing.T) {
	for _, beta := range []float64{0, 0.1} {
		cfg := grpo.DefaultConfig()
		cfg.MaxSeqLen, cfg.MicroBatch, cfg.Temperature, cfg.LR, cfg.Beta = 32, 4, 1, 0.05, beta
		settings := &Settings{GRPO: cfg, Device: "cpu", KeepCheckpoints: 1}
		tok := filepath.Join("..", "..", "examples", "quickstart", "tokenizer.json")
		e, err := Open(context.Background(), EngineOptions{Source: Source{Init: "tiny", Tokenizer: tok, Seed: 3}, Train: settings, NoServe: true})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		k := NewSink(e, settings, "run", t.TempDir(), 0, nil)
		// Step 0: rewards differ, so the policy moves off the reference.
		// Step 1: every reward is 1.
		for step, rewards := range [][]float64{{1, 0, 1, 0}, {1, 1, 1, 1}} {
			before := weights(e)
			st := &runner.Step{Index: step, Metrics: &core.StepMetrics{Extra: map[string]float64{}}}
			for i, r := range rewards {
				st.Trajectories = append(st.Trajectories, core.Trajectory{Step: step, Index: i, Reward: r, Turns: []core.Turn{{
					MessageIndex: 2, PromptTokenIDs: []int{5, 6, 7}, TokenIDs: []int{8 + i, 9, 10 + i},
				}}})
			}
			if err := k.EndStep(context.Background(), st); err != nil {
				t.Fatal(err)
			}
			moved := weights(e) != before
			extra := st.Metrics.Extra
			if step == 0 && (!moved || extra["train/updates"] != 1) {
				t.Fatalf("beta %g: a step with varied rewards did not update: %v", beta, extra)
			}
			if step == 1 && beta == 0 && (moved || extra["train/skipped_update"] != 1) {
				t.Errorf("beta 0: equal rewards moved the weights (%v) or did not say it skipped: %v", moved, extra)
			}
			if step == 1 && beta > 0 && (!moved || extra["train/updates"] != 1 || !(extra["train/kl"] > 0) || !(extra["train/grad_norm"] > 0)) {
				t.Errorf("beta %g: equal rewards should still step on the KL term: moved %v, %v", beta, moved, extra)
			}
		}
	}
}

// weights sums the model's first parameter, enough to see a change.
func weights(e *Engine) float64 {
	p := e.Model.Params()[0]
	w := make([]float32, p.Len())
	e.Model.Device().Download(w, p.W)
	var s float64
	for _, x := range w {
		s += float64(x)
	}
	return s
}
