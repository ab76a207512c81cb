package training

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/rlhost/rlhost/trainer/grpo"
	"github.com/rlhost/rlhost/trainer/lora"
	"github.com/rlhost/rlhost/trainer/model"
	"github.com/rlhost/rlhost/trainer/safetensors"
)

func factors(a *model.Adapter) [][]float32 {
	var out [][]float32
	for _, p := range a.Params() {
		w := make([]float32, p.Len())
		a.Device().Download(w, p.W)
		out = append(out, w)
	}
	return out
}

// TestEngineLoRACheckpointAndOutputs opens a LoRA engine on a preset base,
// moves its adapter, checkpoints it, and reopens the checkpoint to train
// and to serve: the adapter and tokenizer come back. The final outputs
// (merged model, adapter, base) agree with each other.
func TestEngineLoRACheckpointAndOutputs(t *testing.T) {
	ctx := context.Background()
	cfg := grpo.DefaultConfig()
	cfg.MaxSeqLen, cfg.MicroBatch, cfg.Temperature = 32, 2, 1
	cfg.LoRA = &grpo.LoRA{AdapterConfig: model.AdapterConfig{Rank: 4, Alpha: 8, Targets: []model.Module{model.QProj, model.VProj, model.DownProj}}}
	settings := &Settings{GRPO: cfg, Device: "cpu"}
	tok := filepath.Join("..", "..", "examples", "quickstart", "tokenizer.json")
	e, err := Open(ctx, EngineOptions{Source: Source{Init: "tiny", Tokenizer: tok, Seed: 3}, Train: settings, NoServe: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	a := e.Trainer.Adapter()
	if a == nil || e.Model.Adapter() != a {
		t.Fatal("the engine's model does not carry the trainer's adapter")
	}
	// Stand in for training: random factors.
	r := rand.New(rand.NewPCG(1, 1))
	for _, p := range a.Params() {
		w := make([]float32, p.Len())
		for i := range w {
			w[i] = float32(r.NormFloat64() * 0.3)
		}
		a.Device().Upload(p.W, w)
	}
	want := factors(a)
	ck := t.TempDir()
	if err := e.Checkpoint(ck); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"adapter/adapter_config.json", "adapter/adapter_model.safetensors", "model/model.safetensors", "model/tokenizer.json"} {
		if _, err := os.Stat(filepath.Join(ck, f)); err != nil {
			t.Errorf("checkpoint lacks %s: %v", f, err)
		}
	}
	for _, train := range []*Settings{settings, nil} {
		f, err := Open(ctx, EngineOptions{Source: Source{Checkpoint: ck}, Train: train, NoServe: true})
		if err != nil {
			t.Fatal(err)
		}
		got := factors(f.Model.Adapter())
		f.Close()
		for i := range want {
			for j := range want[i] {
				if got[i][j] != want[i][j] {
					t.Fatalf("reopened (training %v): factor %d[%d] %g, saved %g", train != nil, i, j, got[i][j], want[i][j])
				}
			}
		}
	}
	// Final outputs: the merged model equals base/ + adapter/.
	out := t.TempDir()
	final, adir, bdir := filepath.Join(out, FinalDir), filepath.Join(out, AdapterDir), filepath.Join(out, BaseDir)
	if err := e.SaveModel(final, safetensors.F32); err != nil {
		t.Fatal(err)
	}
	if ok, err := e.SaveAdapter(adir, bdir); !ok || err != nil {
		t.Fatalf("save adapter: %v %v", ok, err)
	}
	c, err := lora.ReadConfig(adir)
	if err != nil {
		t.Fatal(err)
	}
	if abs, _ := filepath.Abs(bdir); c.BaseModel != abs {
		t.Fatalf("adapter names base %q, want %q", c.BaseModel, abs)
	}
	be := e.Model.Device()
	merged, err := model.Load(be, final)
	if err != nil {
		t.Fatal(err)
	}
	base, err := model.Load(be, bdir)
	if err != nil {
		t.Fatal(err)
	}
	ad, err := lora.Load(be, base.Cfg, adir)
	if err != nil {
		t.Fatal(err)
	}
	ids := []int32{1, 40, 7, 99, 3, 12}
	lm, lb := lastLogits(t, merged, nil, ids), lastLogits(t, base, ad, ids)
	for i := range lm {
		if math.Abs(float64(lm[i]-lb[i])) > 1e-4 {
			t.Fatalf("logit %d: final/ %g, base/ + adapter/ %g", i, lm[i], lb[i])
		}
	}
}

func lastLogits(t *testing.T, m *model.Model, a *model.Adapter, ids []int32) []float32 {
	t.Helper()
	c, err := m.NewCache(1, len(ids))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetAdapter(a); err != nil {
		t.Fatal(err)
	}
	lg := make([]float32, m.Cfg.VocabSize)
	if err := c.Prefill(0, ids, lg); err != nil {
		t.Fatal(err)
	}
	return lg
}
