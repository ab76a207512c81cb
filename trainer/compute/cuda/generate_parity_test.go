//go:build cudaemu || (cuda && !cudastub)

package cuda_test

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/rlhost/rlhost/trainer/compute"
	"github.com/rlhost/rlhost/trainer/generate"
	"github.com/rlhost/rlhost/trainer/hfconfig"
	"github.com/rlhost/rlhost/trainer/model"
)

var genPrompts = [][]int{{1, 2, 3}, {40, 41, 42, 43, 44}, {7}}

func tinyModel(t *testing.T, be compute.Device) *model.Model {
	t.Helper()
	cfg, err := hfconfig.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.New(be, cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.Init(11, 0.5)
	return m
}

func generateOn(t *testing.T, be compute.Device, o generate.Options) []generate.Result {
	t.Helper()
	res, err := generate.Generate(context.Background(), tinyModel(t, be), genPrompts, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := be.Sync(); err != nil {
		t.Fatal(err)
	}
	return res
}

// Greedy batched generation with the KV cache and the sampler on the
// device produces the CPU's tokens exactly, with log-probs within modelTol.
func TestGenerateGreedyMatchesCPU(t *testing.T) {
	o := generate.Options{MaxTokens: 12}
	ref := generateOn(t, newCPU(t), o)
	got := generateOn(t, newCUDA(t), o)
	for i := range ref {
		if !slices.Equal(ref[i].Tokens, got[i].Tokens) {
			t.Fatalf("sequence %d: cpu %v, cuda %v", i, ref[i].Tokens, got[i].Tokens)
		}
		for j := range ref[i].LogProbs {
			if d := math.Abs(float64(ref[i].LogProbs[j] - got[i].LogProbs[j])); d > modelTol*max(1, math.Abs(float64(ref[i].LogProbs[j]))) {
				t.Errorf("sequence %d token %d: log-prob cpu %g, cuda %g", i, j, ref[i].LogProbs[j], got[i].LogProbs[j])
			}
		}
	}
	if len(ref[0].Tokens) == 0 {
		t.Fatal("nothing generated")
	}
}

// Sampled generation on the device draws the CPU sampler's Philox
// uniforms but walks a top-k set in another order, so its tokens may
// differ from the CPU's; what must hold is that every token is
// one the CPU model allows at that point (inside its top-k set) and that
// the log-prob the device reports is the CPU model's for that token,
// computed by feeding the device's continuation through the CPU's cache.
// A seed reproduces the tokens.
func TestGenerateSampledMatchesCPUModel(t *testing.T) {
	o := generate.Options{MaxTokens: 10, Temperature: 0.8, TopK: 8, Seed: 5}
	dev := newCUDA(t)
	got := generateOn(t, dev, o)
	again := generateOn(t, dev, o)
	cpuM := tinyModel(t, newCPU(t))
	V := cpuM.Cfg.VocabSize
	for b, p := range genPrompts {
		if !slices.Equal(got[b].Tokens, again[b].Tokens) {
			t.Errorf("sequence %d: seed %d drew %v, then %v", b, o.Seed, got[b].Tokens, again[b].Tokens)
		}
		cache, err := cpuM.NewCache(1, len(p)+o.MaxTokens)
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]int32, len(p))
		for i, v := range p {
			ids[i] = int32(v)
		}
		logits := make([]float32, V)
		if err := cache.Prefill(0, ids, logits); err != nil {
			t.Fatal(err)
		}
		for j, tok := range got[b].Tokens {
			var mx float64 = math.Inf(-1)
			above := 0
			for _, z := range logits {
				mx = max(mx, float64(z)/o.Temperature)
				if z > logits[tok] {
					above++
				}
			}
			if above >= o.TopK {
				t.Errorf("sequence %d token %d: %d has %d more likely tokens, top-k is %d", b, j, tok, above, o.TopK)
			}
			var s float64
			for _, z := range logits {
				s += math.Exp(float64(z)/o.Temperature - mx)
			}
			want := float64(logits[tok])/o.Temperature - mx - math.Log(s)
			if d := math.Abs(want - float64(got[b].LogProbs[j])); d > modelTol*max(1, math.Abs(want)) {
				t.Errorf("sequence %d token %d (%d): log-prob cuda %g, cpu model %g", b, j, tok, got[b].LogProbs[j], want)
			}
			if j+1 < len(got[b].Tokens) {
				if err := cache.Prefill(0, []int32{int32(tok)}, logits); err != nil {
					t.Fatal(err)
				}
			}
		}
		if len(got[b].Tokens) != o.MaxTokens {
			t.Errorf("sequence %d: %d tokens, want %d", b, len(got[b].Tokens), o.MaxTokens)
		}
	}
}
