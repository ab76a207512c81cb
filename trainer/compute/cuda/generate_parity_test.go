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

func generateOn(t *testing.T, be compute.Device, o generate.Options) []generate.Result {
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
	res, err := generate.Generate(context.Background(), m, [][]int{{1, 2, 3}, {40, 41, 42, 43, 44}, {7}}, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := be.Sync(); err != nil {
		t.Fatal(err)
	}
	return res
}

// Batched generation with the KV cache on the device produces the CPU's
// tokens. Sampling at temperature 1 draws from the same seeded stream on
// both, so equal tokens mean the device's probabilities agree with the
// CPU's well enough never to move a draw across a token boundary; the
// reported log-probs must agree within modelTol.
func TestGenerateMatchesCPU(t *testing.T) {
	for _, o := range []generate.Options{
		{MaxTokens: 12},
		{MaxTokens: 12, Temperature: 1, Seed: 5},
	} {
		ref := generateOn(t, newCPU(t), o)
		got := generateOn(t, newCUDA(t), o)
		for i := range ref {
			if !slices.Equal(ref[i].Tokens, got[i].Tokens) {
				t.Fatalf("T=%g sequence %d: cpu %v, cuda %v", o.Temperature, i, ref[i].Tokens, got[i].Tokens)
			}
			for j := range ref[i].LogProbs {
				if d := math.Abs(float64(ref[i].LogProbs[j] - got[i].LogProbs[j])); d > modelTol*max(1, math.Abs(float64(ref[i].LogProbs[j]))) {
					t.Errorf("T=%g sequence %d token %d: log-prob cpu %g, cuda %g", o.Temperature, i, j, ref[i].LogProbs[j], got[i].LogProbs[j])
				}
			}
		}
		if len(ref[0].Tokens) == 0 {
			t.Fatal("nothing generated")
		}
	}
}
