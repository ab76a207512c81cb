package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/rlhost/rlhost/trainer/compute"
	"github.com/rlhost/rlhost/trainer/hfconfig"
)

func allModules() []Module { return Modules() }

// randomAdapter is an adapter with random A and B (PEFT's init makes B
// zero, which would hide every error in the B·A path).
func randomAdapter(t *testing.T, be compute.Device, cfg *hfconfig.Config, ac AdapterConfig, seed uint64) *Adapter {
	t.Helper()
	a, err := NewAdapter(be, cfg, ac)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(seed, 2))
	for _, p := range a.params {
		buf := make([]float32, p.Len())
		for i := range buf {
			buf[i] = float32(r.NormFloat64() * 0.3)
		}
		be.Upload(p.W, buf)
	}
	return a
}

// mergedF64 is the base's parameters with scale·B·A added to every
// adapted projection, computed in float64 loops.
func mergedF64(m *Model, a *Adapter) map[string][]float64 {
	P := paramsF64(m)
	s := float64(a.scale) // the device multiplies by the float32 scale
	for l := range m.Cfg.NumLayers {
		for _, mod := range a.Cfg.Targets {
			lo := a.Layer(l, mod)
			A, B := download(a.be, lo.A.W), download(a.be, lo.B.W)
			W := P[fmt.Sprintf("model.layers.%d.%s.weight", l, mod.Path())]
			r := a.Cfg.Rank
			for o := range lo.Out {
				for i := range lo.In {
					var d float64
					for k := range r {
						d += B[o*r+k] * A[k*lo.In+i]
					}
					W[o*lo.In+i] += s * d
				}
			}
		}
	}
	return P
}

// TestAdapterForwardMatchesMergedReference: base + adapter equals the
// independent float64 reference run on the merged weights W + scale·B·A.
func TestAdapterForwardMatchesMergedReference(t *testing.T) {
	for _, tc := range []struct {
		name    string
		targets []Module
		rslora  bool
		bias    bool
	}{
		{"qv", []Module{QProj, VProj}, false, true},
		{"all-rslora", allModules(), true, true},
		{"all-llama", allModules(), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := newBackend64(t)
			cfg := tinyConfig(t, true, tc.bias)
			m := randomModel(t, be, cfg, 11)
			a := randomAdapter(t, be, cfg, AdapterConfig{Rank: 3, Alpha: 5, Targets: tc.targets, RSLoRA: tc.rslora}, 4)
			ids, lens, _ := batch(cfg.VocabSize)
			r, err := m.NewRun(2, 6)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.SetAdapter(a); err != nil {
				t.Fatal(err)
			}
			if err := r.Forward(ids, lens); err != nil {
				t.Fatal(err)
			}
			logits := download(be, r.Logits())
			P := mergedF64(m, a)
			var maxDelta float64
			base := paramsF64(m)
			for b, n := range lens {
				ref := refLogits(cfg, P, ids[b*6:b*6+n])
				plain := refLogits(cfg, base, ids[b*6:b*6+n])
				for i := range n {
					for j, want := range ref[i] {
						got := logits[(b*6+i)*cfg.VocabSize+j]
						if math.Abs(got-want) > 1e-10 {
							t.Fatalf("seq %d pos %d logit %d: %g, merged reference %g", b, i, j, got, want)
						}
						maxDelta = math.Max(maxDelta, math.Abs(want-plain[i][j]))
					}
				}
			}
			if maxDelta < 1e-3 {
				t.Fatalf("adapter changed the logits by at most %g: the test would not see a missing adapter", maxDelta)
			}
		})
	}
}

// TestAdapterInitIsBase: with PEFT's initialisation (B = 0) the adapted
// model's logits equal the base's exactly, in training and generation.
func TestAdapterInitIsBase(t *testing.T) {
	be := newBackend32(t)
	cfg := tinyConfig(t, true, true)
	m := randomModel(t, be, cfg, 3)
	a, err := NewAdapter(be, cfg, AdapterConfig{Rank: 4, Alpha: 8, Targets: allModules()})
	if err != nil {
		t.Fatal(err)
	}
	a.Init(7)
	for l := range cfg.NumLayers {
		for _, mod := range a.Cfg.Targets {
			lo := a.Layer(l, mod)
			A, B := download(be, lo.A.W), download(be, lo.B.W)
			bound := 1 / math.Sqrt(float64(lo.In))
			var maxAbs float64
			for _, v := range A {
				if math.Abs(v) > bound {
					t.Fatalf("layer %d %s: A value %g outside ±%g", l, mod, v, bound)
				}
				maxAbs = math.Max(maxAbs, math.Abs(v))
			}
			if maxAbs < bound/2 {
				t.Fatalf("layer %d %s: A max |%g| is not a uniform draw on ±%g", l, mod, maxAbs, bound)
			}
			for _, v := range B {
				if v != 0 {
					t.Fatalf("layer %d %s: B not zero", l, mod)
				}
			}
		}
	}
	ids, lens, _ := batch(cfg.VocabSize)
	r, _ := m.NewRun(2, 6)
	if err := r.Forward(ids, lens); err != nil {
		t.Fatal(err)
	}
	base := download(be, r.Logits())
	if err := r.SetAdapter(a); err != nil {
		t.Fatal(err)
	}
	if err := r.Forward(ids, lens); err != nil {
		t.Fatal(err)
	}
	for i, v := range download(be, r.Logits()) {
		if v != base[i] {
			t.Fatalf("logit %d: adapted %g, base %g", i, v, base[i])
		}
	}
	c, _ := m.NewCache(1, 8)
	lg, lga := make([]float32, cfg.VocabSize), make([]float32, cfg.VocabSize)
	if err := c.Prefill(0, ids[:6], lg); err != nil {
		t.Fatal(err)
	}
	c.Reset()
	if err := c.SetAdapter(a); err != nil {
		t.Fatal(err)
	}
	if err := c.Prefill(0, ids[:6], lga); err != nil {
		t.Fatal(err)
	}
	for i := range lg {
		if lg[i] != lga[i] {
			t.Fatalf("cache logit %d: adapted %g, base %g", i, lga[i], lg[i])
		}
	}
}

// TestAdapterGradient checks the adapter's gradients, and the base's when
// it trains too, against central finite differences on the float64
// device. With the base frozen it must get no gradients at all.
func TestAdapterGradient(t *testing.T) {
	for _, tc := range []struct {
		name         string
		targets      []Module
		trainBase    bool
		dropout      float64
		tied         bool
		frozenAdapts bool // the adapter has no gradients: only the base trains, through it
	}{
		{"qv-frozen", []Module{QProj, VProj}, false, 0, true, false},
		{"all-frozen-untied", allModules(), false, 0, false, false},
		{"all-with-base", allModules(), true, 0, true, false},
		{"all-dropout", allModules(), true, 0.3, true, false},
		{"base-through-frozen-adapter", allModules(), true, 0, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := newBackend64(t)
			cfg := tinyConfig(t, tc.tied, true)
			m := randomModel(t, be, cfg, 5)
			a := randomAdapter(t, be, cfg, AdapterConfig{Rank: 2, Alpha: 3, Dropout: tc.dropout, Targets: tc.targets}, 6)
			if !tc.frozenAdapts {
				a.AllocGrads()
			}
			if tc.trainBase {
				m.AllocGrads()
			}
			ids, lens, targets := batch(cfg.VocabSize)
			r, err := m.NewRun(2, 6)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.SetAdapter(a); err != nil {
				t.Fatal(err)
			}
			r.SetTraining(true)
			rng := rand.New(rand.NewPCG(9, 9))
			w := make([]float32, 12)
			for i := range w {
				w[i] = float32(rng.Float64()*2 - 1)
			}
			lp := make([]float32, 12)
			loss := func() float64 {
				a.dropSeed = 100 // the same dropout masks in every evaluation
				if err := r.Forward(ids, lens); err != nil {
					t.Fatal(err)
				}
				if err := r.LogProbs(targets, 1, lp); err != nil {
					t.Fatal(err)
				}
				v := download(be, r.logp)
				var s float64
				for i := range v {
					s += float64(w[i]) * v[i]
				}
				return s
			}
			loss()
			if err := r.Backward(w); err != nil {
				t.Fatal(err)
			}
			var params []*Param
			if !tc.frozenAdapts {
				params = a.Params()
			}
			if tc.trainBase {
				params = append(params, m.Params()...)
			} else {
				for _, p := range m.Params() {
					if p.G != nil {
						t.Fatalf("frozen base parameter %s has a gradient", p.Name)
					}
				}
			}
			for _, p := range params {
				g := download(be, p.G)
				x := download(be, p.W)
				for range 3 {
					i := rng.IntN(p.Len())
					orig := x[i]
					x[i] = orig + 1e-5
					be.Upload64(p.W, x)
					lp := loss()
					x[i] = orig - 1e-5
					be.Upload64(p.W, x)
					lm := loss()
					x[i] = orig
					be.Upload64(p.W, x)
					num := (lp - lm) / 2e-5
					if math.Abs(num-g[i]) > 1e-6*math.Max(1, math.Abs(num)) {
						t.Fatalf("%s[%d]: analytic %.10g numeric %.10g", p.Name, i, g[i], num)
					}
				}
			}
		})
	}
}

// TestAdapterDropoutOnlyInTraining: dropout changes the training forward,
// never an evaluation forward.
func TestAdapterDropoutOnlyInTraining(t *testing.T) {
	be := newBackend64(t)
	cfg := tinyConfig(t, true, true)
	m := randomModel(t, be, cfg, 5)
	ac := AdapterConfig{Rank: 2, Alpha: 3, Targets: allModules()}
	plain := randomAdapter(t, be, cfg, ac, 6)
	ac.Dropout = 0.5
	dropped := randomAdapter(t, be, cfg, ac, 6)
	ids, lens, _ := batch(cfg.VocabSize)
	logits := func(a *Adapter, train bool) []float64 {
		r, _ := m.NewRun(2, 6)
		if err := r.SetAdapter(a); err != nil {
			t.Fatal(err)
		}
		r.SetTraining(train)
		if err := r.Forward(ids, lens); err != nil {
			t.Fatal(err)
		}
		return download(be, r.Logits())
	}
	want := logits(plain, false)
	for i, v := range logits(dropped, false) {
		if v != want[i] {
			t.Fatalf("eval forward with dropout differs at %d", i)
		}
	}
	differs := false
	for i, v := range logits(dropped, true) {
		differs = differs || v != want[i]
	}
	if !differs {
		t.Fatal("training forward with dropout 0.5 equals the plain one")
	}
}

// TestCacheWithAdapterMatchesRun: the KV-cached forward with an adapter
// gives the training forward's logits, and detaching restores the base.
func TestCacheWithAdapterMatchesRun(t *testing.T) {
	be := newBackend64(t)
	cfg := tinyConfig(t, true, true)
	m := randomModel(t, be, cfg, 8)
	a := randomAdapter(t, be, cfg, AdapterConfig{Rank: 3, Alpha: 6, Targets: allModules()}, 1)
	V, T := cfg.VocabSize, 6
	ids := []int32{3, 17, 5, 60, 1, 9}
	full := func(ad *Adapter) []float64 {
		r, _ := m.NewRun(1, T)
		if err := r.SetAdapter(ad); err != nil {
			t.Fatal(err)
		}
		if err := r.Forward(ids, []int{T}); err != nil {
			t.Fatal(err)
		}
		return download(be, r.Logits())
	}
	for _, ad := range []*Adapter{a, nil} {
		want := full(ad)
		c, _ := m.NewCache(2, 8)
		if err := c.SetAdapter(ad); err != nil {
			t.Fatal(err)
		}
		lg := make([]float32, V)
		if err := c.Prefill(0, ids[:3], lg); err != nil {
			t.Fatal(err)
		}
		both := make([]float32, V)
		for pos := 3; pos < T; pos++ {
			if err := c.Prefill(0, ids[pos:pos+1], both); err != nil {
				t.Fatal(err)
			}
			for j := range V {
				if math.Abs(float64(both[j])-want[pos*V+j]) > 1e-6 {
					t.Fatalf("adapter %v pos %d logit %d: cache %g, run %g", ad != nil, pos, j, both[j], want[pos*V+j])
				}
			}
		}
	}
}

func TestAdapterConfigValidation(t *testing.T) {
	cfg := tinyConfig(t, true, true)
	be := newBackend32(t)
	for _, ac := range []AdapterConfig{
		{Rank: 0, Alpha: 1, Targets: []Module{QProj}},
		{Rank: 2, Alpha: 0, Targets: []Module{QProj}},
		{Rank: 2, Alpha: 1, Dropout: 1, Targets: []Module{QProj}},
		{Rank: 2, Alpha: 1},
		{Rank: 2, Alpha: 1, Targets: []Module{QProj, QProj}},
	} {
		if _, err := NewAdapter(be, cfg, ac); err == nil {
			t.Errorf("%+v: want error", ac)
		}
	}
	for _, s := range []string{"q", "q_proj", "down", "down_proj"} {
		if _, ok := ParseModule(s); !ok {
			t.Errorf("ParseModule(%q) failed", s)
		}
	}
	if _, ok := ParseModule("qproj"); ok {
		t.Error("ParseModule(qproj) accepted")
	}
	if got := AdapterKey(3, GateProj, "lora_B"); got != "base_model.model.model.layers.3.mlp.gate_proj.lora_B.weight" {
		t.Errorf("key %q", got)
	}
}
