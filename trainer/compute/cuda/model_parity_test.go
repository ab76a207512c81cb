//go:build cudaemu || (cuda && !cudastub)

package cuda_test

import (
	"math"
	"testing"

	"github.com/rlhost/rlhost/trainer/compute"
	"github.com/rlhost/rlhost/trainer/hfconfig"
	"github.com/rlhost/rlhost/trainer/model"
)

// stepResult is what one GRPO-like step on the tiny model produces.
type stepResult struct {
	logp, logp2 []float32            // log-probs before and after the update
	grads       map[string][]float32 // gradients of the first backward
	gradNorm    float64
	params      map[string][]float32 // parameters after the update
	genLogits   []float32            // prefill + two decode steps
}

// grpoStep runs, on be: forward, log-probs at temperature 0.8, a backward
// of a policy-gradient loss (dlogp = −advantage/tokens), gradient clipping
// by global norm, AdamW, and a second forward; then KV-cache generation
// logits. It is the loop the GRPO trainer runs, without rollouts.
func grpoStep(t *testing.T, be compute.Device) stepResult {
	t.Helper()
	cfg, err := hfconfig.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.New(be, cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.Init(7, 0.2)
	m.AllocGrads()
	const B, T = 3, 9
	lens := []int{9, 5, 7}
	ids := make([]int32, B*T)
	targets := make([]int32, B*T)
	for i := range ids {
		ids[i] = int32((i*37 + 11) % cfg.VocabSize)
	}
	for i := range targets {
		targets[i] = -1
		if (i+1)%T != 0 {
			targets[i] = ids[i+1]
		}
	}
	run, err := m.NewRun(B, T)
	if err != nil {
		t.Fatal(err)
	}
	var res stepResult
	res.logp = make([]float32, B*T)
	if err := run.Forward(ids, lens); err != nil {
		t.Fatal(err)
	}
	if err := run.LogProbs(targets, 0.8, res.logp); err != nil {
		t.Fatal(err)
	}
	adv := []float32{1.5, -0.5, -1}
	dlogp := make([]float32, B*T)
	for i := range dlogp {
		b := i / T
		if i%T < lens[b]-1 {
			dlogp[i] = -adv[b] / float32(lens[b]-1)
		}
	}
	m.ZeroGrads()
	if err := run.Backward(dlogp); err != nil {
		t.Fatal(err)
	}
	res.grads = map[string][]float32{}
	for _, p := range m.Params() {
		res.grads[p.Name] = download(be, p.G)
	}
	res.gradNorm = m.GradNorm()
	if clip := 1.0; res.gradNorm > clip {
		for _, p := range m.Params() {
			be.Scale(p.G, float32(clip/res.gradNorm))
		}
	}
	res.params = map[string][]float32{}
	for _, p := range m.Params() {
		mom, vel := be.Alloc(p.Len()), be.Alloc(p.Len())
		be.AdamW(p.W, p.G, mom, vel, compute.AdamWParams{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, Step: 1})
		res.params[p.Name] = download(be, p.W)
	}
	res.logp2 = make([]float32, B*T)
	if err := run.Forward(ids, lens); err != nil {
		t.Fatal(err)
	}
	if err := run.LogProbs(targets, 0.8, res.logp2); err != nil {
		t.Fatal(err)
	}

	cache, err := m.NewCache(2, 16)
	if err != nil {
		t.Fatal(err)
	}
	V := cfg.VocabSize
	res.genLogits = make([]float32, 0, 6*V)
	one := make([]float32, V)
	for b, prompt := range [][]int32{{1, 2, 3, 4, 5}, {9, 8}} {
		if err := cache.Prefill(b, prompt, one); err != nil {
			t.Fatal(err)
		}
		res.genLogits = append(res.genLogits, one...)
	}
	two := make([]float32, 2*V)
	for _, step := range [][]int32{{6, 7}, {10, 11}} {
		if err := cache.Decode(step, two); err != nil {
			t.Fatal(err)
		}
		res.genLogits = append(res.genLogits, two...)
	}
	if err := be.Sync(); err != nil {
		t.Fatal(err)
	}
	return res
}

func TestTinyModelGRPOStepMatchesCPU(t *testing.T) {
	ref := grpoStep(t, newCPU(t))
	got := grpoStep(t, newCUDA(t))
	compare(t, "logp", ref.logp, got.logp, modelTol)
	for name, g := range ref.grads {
		compare(t, "grad "+name, g, got.grads[name], modelTol)
	}
	if d := math.Abs(ref.gradNorm - got.gradNorm); d > modelTol*ref.gradNorm {
		t.Errorf("grad norm: cpu %g, cuda %g", ref.gradNorm, got.gradNorm)
	}
	for name, p := range ref.params {
		compare(t, "updated "+name, p, got.params[name], modelTol)
	}
	compare(t, "logp after update", ref.logp2, got.logp2, modelTol)
	compare(t, "generation logits", ref.genLogits, got.genLogits, modelTol)
	// The update must have moved the policy, or the comparison above
	// would pass for a step that did nothing.
	var moved float64
	for i := range ref.logp {
		moved = max(moved, math.Abs(float64(ref.logp2[i]-ref.logp[i])))
	}
	if moved < 1e-4 {
		t.Fatalf("the step changed no log-prob by more than %g", moved)
	}
}
