package grpo

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlhost/rlhost/trainer/lora"
	"github.com/rlhost/rlhost/trainer/model"
	"github.com/rlhost/rlhost/trainer/safetensors"
)

func adapterWeights(a *model.Adapter) [][]float32 {
	var out [][]float32
	for _, p := range a.Params() {
		w := make([]float32, p.Len())
		a.Device().Download(w, p.W)
		out = append(out, w)
	}
	return out
}

// TestLoRACheckpointResume: a LoRA run saved after 2 steps and resumed
// continues exactly as the uninterrupted run, for a base made in memory
// (saved into the checkpoint) and one loaded from a directory (referred
// to), with and without the KL term (whose reference is the base).
func TestLoRACheckpointResume(t *testing.T) {
	for _, tc := range []struct {
		beta     float64
		fromDisk bool
	}{{0, false}, {0.05, true}} {
		t.Run(fmt.Sprintf("beta=%g,disk=%v", tc.beta, tc.fromDisk), func(t *testing.T) {
			be := backend32(t)
			cfg := DefaultConfig()
			cfg.MaxSeqLen, cfg.MicroBatch, cfg.LR, cfg.Beta = 16, 2, 3e-3, tc.beta
			cfg.NumIterations, cfg.Schedule, cfg.WarmupSteps, cfg.TotalSteps = 2, "cosine", 2, 10
			cfg.WeightDecay = 0.01
			cfg.LoRA = &LoRA{AdapterConfig: model.AdapterConfig{Rank: 4, Alpha: 8, Dropout: 0.1,
				Targets: []model.Module{model.QProj, model.VProj, model.UpProj}}, Seed: 3}
			baseDir := filepath.Join(t.TempDir(), "base")
			if err := tinyModel(t, be, 0, 7).Save(baseDir, safetensors.F32); err != nil {
				t.Fatal(err)
			}
			newModel := func() *model.Model {
				if !tc.fromDisk {
					return tinyModel(t, be, 0, 7)
				}
				m, err := model.Load(be, baseDir)
				if err != nil {
					t.Fatal(err)
				}
				return m
			}
			r := rand.New(rand.NewPCG(5, 5))
			batches := make([][][]Sample, 4)
			for i := range batches {
				batches[i] = randomGroups(r, 64, 2, 3, 12)
			}
			a, err := New(newModel(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			var want []Stats
			for _, b := range batches {
				st, err := a.Step(context.Background(), b)
				if err != nil {
					t.Fatal(err)
				}
				if st.Skipped != "" || st.GradNorm == 0 && st.ZeroStdGroups < st.Groups {
					t.Fatalf("step: %+v", st)
				}
				want = append(want, st)
			}
			b, err := New(newModel(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			for _, batch := range batches[:2] {
				if _, err := b.Step(context.Background(), batch); err != nil {
					t.Fatal(err)
				}
			}
			dir := t.TempDir()
			if err := b.Save(dir); err != nil {
				t.Fatal(err)
			}
			// The checkpoint holds the adapter in PEFT layout and AdamW
			// moments of its factors only; the base is copied only when it
			// has no directory of its own.
			if _, err := os.Stat(filepath.Join(dir, "model")); (err == nil) == tc.fromDisk {
				t.Fatalf("checkpoint model/ present: %v, base from disk: %v", err == nil, tc.fromDisk)
			}
			if _, err := lora.ReadConfig(filepath.Join(dir, "adapter")); err != nil {
				t.Fatal(err)
			}
			f, err := safetensors.Open(filepath.Join(dir, optimizerFile))
			if err != nil {
				t.Fatal(err)
			}
			if n := len(f.Header.Tensors); n != 2*len(b.Adapter().Params()) {
				t.Fatalf("optimizer file holds %d tensors, want 2 per adapter factor (%d)", n, 2*len(b.Adapter().Params()))
			}
			for _, ti := range f.Header.Tensors {
				if !strings.Contains(ti.Name, ".lora_") {
					t.Fatalf("optimizer state for base parameter %s", ti.Name)
				}
			}
			f.Close()
			c, err := Resume(be, dir)
			if err != nil {
				t.Fatal(err)
			}
			if c.OptimizerStep() != 4 || c.Adapter() == nil || c.Model().Adapter() != c.Adapter() {
				t.Fatalf("resumed at step %d, adapter %v", c.OptimizerStep(), c.Adapter() != nil)
			}
			// A checkpoint of the resumed trainer refers to the same base
			// directory, or holds its own copy when the base came from the
			// first checkpoint (which pruning may remove).
			dir2 := t.TempDir()
			if err := c.Save(dir2); err != nil {
				t.Fatal(err)
			}
			weights, _, err := ModelDir(dir2)
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(dir2, "model"); tc.fromDisk {
				if abs, _ := filepath.Abs(baseDir); weights != abs {
					t.Fatalf("second checkpoint's base %s, want %s", weights, abs)
				}
			} else if weights != want {
				t.Fatalf("second checkpoint's base %s, want its own copy %s", weights, want)
			}
			for i, batch := range batches[2:] {
				st, err := c.Step(context.Background(), batch)
				if err != nil {
					t.Fatal(err)
				}
				if w := want[2+i]; st.Loss != w.Loss || st.GradNorm != w.GradNorm || st.LR != w.LR || st.KL != w.KL {
					t.Errorf("step %d after resume: loss %g grad %g lr %g kl %g, uninterrupted %g %g %g %g",
						2+i, st.Loss, st.GradNorm, st.LR, st.KL, w.Loss, w.GradNorm, w.LR, w.KL)
				}
			}
			wa, wc := adapterWeights(a.Adapter()), adapterWeights(c.Adapter())
			for i := range wa {
				for j := range wa[i] {
					if math.Float32bits(wa[i][j]) != math.Float32bits(wc[i][j]) {
						t.Fatalf("factor %s[%d]: resumed %g, uninterrupted %g", a.Adapter().Params()[i].Name, j, wc[i][j], wa[i][j])
					}
				}
			}
			// Resuming as full fine-tuning, or with another rank, is refused.
			full := cfg
			full.LoRA = nil
			if _, err := ResumeWith(be, dir, &full); err == nil || !strings.Contains(err.Error(), "LoRA") {
				t.Fatalf("resume without lora: %v", err)
			}
			other := cfg
			other.LoRA = &LoRA{AdapterConfig: cfg.LoRA.AdapterConfig}
			other.LoRA.Rank = 8
			if _, err := ResumeWith(be, dir, &other); err == nil || !strings.Contains(err.Error(), "rank 4") {
				t.Fatalf("resume with rank 8: %v", err)
			}
		})
	}
}
