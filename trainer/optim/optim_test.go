package optim

import (
	"math"
	"testing"

	"github.com/rlhost/rlhost/trainer/compute/cpu"
	"github.com/rlhost/rlhost/trainer/hfconfig"
	"github.com/rlhost/rlhost/trainer/model"
)

// TestLRAt checks the schedules against transformers' lambdas worked by
// hand: warm-up k/W, then constant 1, linear (total-k)/(total-W), or
// cosine 0.5(1+cos(π(k-W)/(total-W))).
func TestLRAt(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		want []float64
	}{
		{Config{LR: 1, Schedule: Constant}, []float64{1, 1, 1}},
		{Config{LR: 2, Schedule: Constant, WarmupSteps: 4}, []float64{0, 0.5, 1, 1.5, 2, 2}},
		{Config{LR: 1, Schedule: Linear, WarmupSteps: 2, TotalSteps: 6}, []float64{0, 0.5, 1, 0.75, 0.5, 0.25, 0, 0}},
		{Config{LR: 1, Schedule: Cosine, WarmupSteps: 1, TotalSteps: 5}, []float64{0, 1, 0.5 * (1 + math.Cos(math.Pi/4)), 0.5, 0.5 * (1 + math.Cos(3*math.Pi/4)), 0, 0}},
	} {
		for k, w := range tc.want {
			if got := tc.c.LRAt(k); math.Abs(got-w) > 1e-15 {
				t.Errorf("%s warmup %d total %d: LR at update %d = %g, want %g", tc.c.Schedule, tc.c.WarmupSteps, tc.c.TotalSteps, k, got, w)
			}
		}
	}
}

func TestClipAndUpdate(t *testing.T) {
	be, err := cpu.New(cpu.Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	hf, err := hfconfig.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.New(be, hf)
	if err != nil {
		t.Fatal(err)
	}
	m.Init(1, 0.02)
	m.AllocGrads()
	var n int
	for _, p := range m.Params() {
		be.Fill(p.G, 0.5)
		n += p.Len()
	}
	norm := 0.5 * math.Sqrt(float64(n))
	if got := ClipGradNorm(m, 0); math.Abs(got-norm) > 1e-9*norm {
		t.Fatalf("norm %g, want %g", got, norm)
	}
	if got := ClipGradNorm(m, 1); math.Abs(got-norm) > 1e-9*norm {
		t.Fatalf("norm before clipping %g, want %g", got, norm)
	}
	if got := m.GradNorm(); math.Abs(got-1) > 1e-5 {
		t.Fatalf("norm after clipping %g, want 1", got)
	}
	a, err := NewAdamW(m, Config{LR: 0.1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.5, Schedule: Constant})
	if err != nil {
		t.Fatal(err)
	}
	// Norm weights are 1 after Init and not decayed; their first AdamW
	// step moves them by exactly lr (m̂/sqrt(v̂) = 1 for a constant grad).
	p, _ := m.Param("model.norm.weight")
	if lr := a.Update(); lr != 0.1 || a.Step() != 1 {
		t.Fatalf("update lr %g step %d", lr, a.Step())
	}
	w := make([]float32, p.Len())
	be.Download(w, p.W)
	if math.Abs(float64(w[0])-0.9) > 1e-6 {
		t.Fatalf("norm weight after one step %g, want 0.9 (no decay on 1-D params)", w[0])
	}
	if _, err := NewAdamW(m, Config{LR: 1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Schedule: "cosine"}); err == nil {
		t.Fatal("cosine without total steps accepted")
	}
}
