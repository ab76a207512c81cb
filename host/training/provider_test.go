package training

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/host/policy"
	"github.com/rlhost/rlhost/trainer/grpo"
)

func ptrTo[T any](v T) *T { return &v }

// OpenPolicy builds the embedded policy in the open: the engine (model,
// trainer, server) and a policy that reaches the server over HTTP, whose
// answers carry the sampled token ids and the weights' version; an update
// through the engine makes the next answers report the next version.
func TestOpenPolicyEmbedded(t *testing.T) {
	ctx := context.Background()
	cfg := policy.Config{Name: "student", Provider: ProviderName, Init: ptrTo("tiny"),
		Tokenizer: ptrTo("../../examples/quickstart/tokenizer.json"), InitSeed: ptrTo(3), MaxTokens: ptrTo(4)}
	g := grpo.DefaultConfig()
	g.MaxSeqLen, g.MicroBatch = 128, 2
	e, p, err := OpenPolicy(ctx, cfg, ".", PolicyOptions{Train: &Settings{GRPO: g, Device: "cpu"}, ResumeVersion: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	defer p.Close()
	if e.Trainer == nil || e.Server == nil || e.Model != e.Trainer.Model() {
		t.Fatalf("engine: trainer %v, server %v", e.Trainer != nil, e.Server != nil)
	}
	ask := func() policy.Choice {
		t.Helper()
		resp, err := p.Complete(ctx, policy.Request{Messages: []core.Message{{Role: core.RoleUser, Content: "hi"}}, TaskID: "t", Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Choices[0]
	}
	c := ask()
	if len(c.TokenIDs) == 0 || len(c.PromptTokenIDs) == 0 || len(c.LogProbs) != len(c.TokenIDs) {
		t.Errorf("choice without token ids: %+v", c)
	}
	if c.WeightsVersion == nil || *c.WeightsVersion != 5 {
		t.Errorf("a resumed engine's first answer reports version %v, want 5", c.WeightsVersion)
	}
	if err := e.Exclusive(ctx, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := e.Update(ctx, func() (bool, error) { return true, nil }); err != nil {
		t.Fatal(err)
	}
	if v := ask().WeightsVersion; v == nil || *v != 6 || e.Version() != 6 {
		t.Errorf("after one update the answer reports version %v (engine %d), want 6", v, e.Version())
	}
	if err := e.Update(ctx, func() (bool, error) { return false, errors.New("skipped") }); err == nil || e.Version() != 6 {
		t.Errorf("an update that changed nothing: error %v, version %d (want 6)", err, e.Version())
	}
}

// A block OpenPolicy refuses says which setting, for the caller to place.
func TestOpenPolicyRefusesAtTheSetting(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  policy.Config
		path []string
	}{
		{"no model", policy.Config{Name: "p", Provider: ProviderName}, []string{"model"}},
		{"not a model directory", policy.Config{Name: "p", Provider: ProviderName, Model: ptrTo(t.TempDir())}, []string{"model"}},
		{"init without tokenizer", policy.Config{Name: "p", Provider: ProviderName, Init: ptrTo("tiny")}, []string{"tokenizer"}},
		{"max_batch", policy.Config{Name: "p", Provider: ProviderName, Init: ptrTo("tiny"), Tokenizer: ptrTo("../../examples/quickstart/tokenizer.json"), MaxBatch: ptrTo(0)}, []string{"max_batch"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := OpenPolicy(context.Background(), tc.cfg, ".", PolicyOptions{})
			d := schema.FromError(err)
			if len(d) != 1 || !slices.Equal(d[0].Path, tc.path) {
				t.Errorf("error %v, want one diagnostic at %v", err, tc.path)
			}
		})
	}
	if Opens("openai", &Settings{}) || !Opens(ProviderName, nil) || Opens(VLLMProviderName, nil) {
		t.Error("Opens is wrong about which providers a trainer opens")
	}
}
