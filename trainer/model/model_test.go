package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlhost/rlhost/trainer/compute"
	"github.com/rlhost/rlhost/trainer/compute/cpu"
	"github.com/rlhost/rlhost/trainer/hfconfig"
	"github.com/rlhost/rlhost/trainer/safetensors"
)

func tinyConfig(t *testing.T, tied, bias bool) *hfconfig.Config {
	t.Helper()
	c, err := hfconfig.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	c.TieWordEmbeddings, c.AttentionBias = tied, bias
	if !bias {
		c.ModelType = "llama"
	}
	return c
}

func newBackend64(t *testing.T) *cpu.Device[float64] {
	t.Helper()
	b, err := cpu.New64(cpu.Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

func newBackend32(t *testing.T) *cpu.Device[float32] {
	t.Helper()
	b, err := cpu.New(cpu.Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// randomModel initialises m with random values in every parameter,
// including biases and norm weights (which Init leaves at 0 and 1), so the
// tests exercise every term of the formulas.
func randomModel(t *testing.T, be compute.Device, cfg *hfconfig.Config, seed uint64) *Model {
	t.Helper()
	m, err := New(be, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(seed, 1))
	for _, p := range m.params {
		buf := make([]float32, p.Len())
		for i := range buf {
			switch {
			case isNorm(p.Name):
				buf[i] = float32(0.5 + r.Float64())
			case len(p.Shape) == 1:
				buf[i] = float32(r.NormFloat64() * 0.1)
			default:
				buf[i] = float32(r.NormFloat64() * 0.3)
			}
		}
		be.Upload(p.W, buf)
	}
	return m
}

// download reads t at full precision: float64 where the backend has it.
func download(be compute.Device, t compute.Tensor) []float64 {
	out := make([]float64, t.Len())
	if b, ok := be.(compute.Float64IO); ok {
		b.Download64(out, t)
		return out
	}
	f := make([]float32, t.Len())
	be.Download(f, t)
	for i, v := range f {
		out[i] = float64(v)
	}
	return out
}

func paramsF64(m *Model) map[string][]float64 {
	out := map[string][]float64{}
	for _, p := range m.params {
		f := make([]float32, p.Len())
		m.be.Download(f, p.W)
		d := make([]float64, len(f))
		for i, v := range f {
			d[i] = float64(v)
		}
		out[p.Name] = d
	}
	return out
}

// refLogits is the reference: Qwen2's forward for one unpadded sequence,
// transcribed from the formulas of transformers' modeling_qwen2.py into
// float64 nested loops, sharing no code with the package under test.
//
//	h = x + o_proj(attn(rope(q_proj(n1)), rope(k_proj(n1)), v_proj(n1))), n1 = rms(x)·w1
//	x' = h + down(silu(gate(n2)) ⊙ up(n2)), n2 = rms(h)·w2
//	rms(x) = x / sqrt(mean(x²) + eps); logits = lm_head(rms(x_L)·w_f)
//
// RoPE uses rotate_half: for i < d/2 with angle t·theta^(−2i/d),
// (x_i, x_{i+d/2}) → (x_i cos − x_{i+d/2} sin, x_{i+d/2} cos + x_i sin).
func refLogits(c *hfconfig.Config, P map[string][]float64, ids []int32) [][]float64 {
	C, I, V, L := c.HiddenSize, c.IntermediateSize, c.VocabSize, c.NumLayers
	hq, hkv, hd := c.NumHeads, c.NumKVHeads, c.HeadDim
	n := len(ids)
	rms := func(x, w []float64) []float64 {
		var s float64
		for _, v := range x {
			s += v * v
		}
		r := 1 / math.Sqrt(s/float64(len(x))+c.RMSNormEps)
		out := make([]float64, len(x))
		for i := range x {
			out[i] = w[i] * x[i] * r
		}
		return out
	}
	linear := func(name string, x []float64, out int, bias bool) []float64 {
		W := P[name+".weight"]
		y := make([]float64, out)
		for o := range out {
			for i, v := range x {
				y[o] += W[o*len(x)+i] * v
			}
			if bias {
				y[o] += P[name+".bias"][o]
			}
		}
		return y
	}
	// transformers builds the RoPE table in float32 whatever the model
	// dtype: inv_freq = 1/theta^(arange(0,d,2)/d), freqs = pos·inv_freq,
	// cos/sin of that, each rounded to float32. The reference does the same
	// so that float64 runs can be compared at 1e-10.
	rope := func(v []float64, t int) {
		for h := 0; h < len(v)/hd; h++ {
			for i := range hd / 2 {
				invFreq := float32(1 / float32(math.Pow(c.RopeTheta, float64(float32(2*i)/float32(hd)))))
				ang := float64(float32(t) * invFreq)
				cos, sin := float64(float32(math.Cos(ang))), float64(float32(math.Sin(ang)))
				a, b := v[h*hd+i], v[h*hd+i+hd/2]
				v[h*hd+i] = a*cos - b*sin
				v[h*hd+i+hd/2] = b*cos + a*sin
			}
		}
	}
	x := make([][]float64, n)
	for t, id := range ids {
		x[t] = append([]float64{}, P["model.embed_tokens.weight"][int(id)*C:(int(id)+1)*C]...)
	}
	for l := range L {
		pre := fmt.Sprintf("model.layers.%d.", l)
		q, k, v := make([][]float64, n), make([][]float64, n), make([][]float64, n)
		for t := range n {
			h := rms(x[t], P[pre+"input_layernorm.weight"])
			q[t] = linear(pre+"self_attn.q_proj", h, hq*hd, c.AttentionBias)
			k[t] = linear(pre+"self_attn.k_proj", h, hkv*hd, c.AttentionBias)
			v[t] = linear(pre+"self_attn.v_proj", h, hkv*hd, c.AttentionBias)
			rope(q[t], t)
			rope(k[t], t)
		}
		for t := range n {
			o := make([]float64, hq*hd)
			for h := range hq {
				g := h / (hq / hkv)
				s := make([]float64, t+1)
				mx := math.Inf(-1)
				for j := 0; j <= t; j++ {
					for e := range hd {
						s[j] += q[t][h*hd+e] * k[j][g*hd+e]
					}
					s[j] /= math.Sqrt(float64(hd))
					mx = math.Max(mx, s[j])
				}
				var z float64
				for j := range s {
					s[j] = math.Exp(s[j] - mx)
					z += s[j]
				}
				for j := range s {
					for e := range hd {
						o[h*hd+e] += s[j] / z * v[j][g*hd+e]
					}
				}
			}
			a := linear(pre+"self_attn.o_proj", o, C, false)
			for i := range C {
				x[t][i] += a[i]
			}
		}
		for t := range n {
			h := rms(x[t], P[pre+"post_attention_layernorm.weight"])
			g := linear(pre+"mlp.gate_proj", h, I, false)
			u := linear(pre+"mlp.up_proj", h, I, false)
			for i := range I {
				g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
			}
			d := linear(pre+"mlp.down_proj", g, C, false)
			for i := range C {
				x[t][i] += d[i]
			}
		}
	}
	head := "lm_head"
	if c.TieWordEmbeddings {
		head = "model.embed_tokens"
	}
	out := make([][]float64, n)
	for t := range n {
		out[t] = linear(head, rms(x[t], P["model.norm.weight"]), V, false)
	}
	return out
}

func refLogProb(logits []float64, target int, temp float64) float64 {
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = math.Max(mx, v/temp)
	}
	var s float64
	for _, v := range logits {
		s += math.Exp(v/temp - mx)
	}
	return logits[target]/temp - mx - math.Log(s)
}

// batch builds B=2 padded sequences of lengths 6 and 4 in a T=6 run.
func batch(V int) (ids []int32, lens []int, targets []int32) {
	seqs := [][]int32{{3, 17, 5, 60, 1, 9}, {42, 7, 7, 30}}
	T := 6
	ids, targets = make([]int32, 2*T), make([]int32, 2*T)
	for b, s := range seqs {
		for t := range T {
			targets[b*T+t] = -1
			if t < len(s) {
				ids[b*T+t] = s[t] % int32(V)
			}
			if t+1 < len(s) {
				targets[b*T+t] = s[t+1] % int32(V)
			}
		}
		lens = append(lens, len(s))
	}
	return ids, lens, targets
}

func TestForwardMatchesReference(t *testing.T) {
	for _, tc := range []struct {
		name       string
		tied, bias bool
		f64        bool
	}{
		{"qwen2-tied-f64", true, true, true},
		{"qwen2-untied-f64", false, true, true},
		{"llama-nobias-f64", true, false, true},
		{"qwen2-tied-f32", true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tinyConfig(t, tc.tied, tc.bias)
			var be compute.Device = newBackend32(t)
			// float64 runs agree with the float64 reference to rounding
			// (~1e-13); float32 runs carry ~1e-7 relative error per op
			// through a dozen ops, so 1e-4 absolute on O(1) logits.
			tol := 1e-4
			if tc.f64 {
				be, tol = newBackend64(t), 1e-10
			}
			m := randomModel(t, be, cfg, 11)
			ids, lens, targets := batch(cfg.VocabSize)
			r, err := m.NewRun(2, 6)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Forward(ids, lens); err != nil {
				t.Fatal(err)
			}
			logits := download(be, r.Logits())
			// 0.5 has an exact float32 reciprocal, so the backend's float32
			// 1/T and the reference's division agree exactly.
			for _, temp := range []float32{1, 0.5} {
				lp32 := make([]float32, 12)
				if err := r.LogProbs(targets, temp, lp32); err != nil {
					t.Fatal(err)
				}
				lp := download(be, r.logp)
				P := paramsF64(m)
				for b, n := range lens {
					ref := refLogits(cfg, P, ids[b*6:b*6+n])
					for i := range n {
						for j, want := range ref[i] {
							if got := logits[(b*6+i)*cfg.VocabSize+j]; math.Abs(got-want) > tol {
								t.Fatalf("seq %d pos %d logit %d: %g, reference %g", b, i, j, got, want)
							}
						}
						want := 0.0
						if tg := targets[b*6+i]; tg >= 0 {
							want = refLogProb(ref[i], int(tg), float64(temp))
						}
						if got := lp[b*6+i]; math.Abs(got-want) > tol {
							t.Fatalf("T=%g seq %d pos %d logprob %g, reference %g", temp, b, i, got, want)
						}
					}
					for i := n; i < 6; i++ {
						if lp[b*6+i] != 0 {
							t.Fatalf("padding row %d of seq %d has logprob %g", i, b, lp[b*6+i])
						}
					}
				}
			}
		})
	}
}

// TestHandComputed checks cases small enough to work out on paper, with a
// 1-layer model, hidden 2, vocab 2, one head of dim 2, eps 0, tied head.
func TestHandComputed(t *testing.T) {
	cfg := &hfconfig.Config{ModelType: "qwen2", HiddenSize: 2, IntermediateSize: 2, NumLayers: 1,
		NumHeads: 1, NumKVHeads: 1, HeadDim: 2, VocabSize: 2, MaxPositions: 8, RMSNormEps: 0,
		RopeTheta: 10000, TieWordEmbeddings: true, AttentionBias: true}
	set := func(m *Model, name string, v ...float32) {
		p, ok := m.Param(name)
		if !ok {
			t.Fatalf("no param %s", name)
		}
		m.be.Upload(p.W, v)
	}
	setup := func(t *testing.T) *Model {
		be := newBackend64(t)
		// Ones only in the norms, the rest zero: attention and MLP add 0.
		cfg.RMSNormEps = 1e-300 // Validate wants > 0; negligible next to mean(x²)
		m, err := New(be, cfg)
		if err != nil {
			t.Fatal(err)
		}
		set(m, "model.embed_tokens.weight", 3, 4, 1, 0)
		for _, n := range []string{"model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight", "model.norm.weight"} {
			set(m, n, 1, 1)
		}
		return m
	}
	logitsOf := func(t *testing.T, m *Model, ids []int32) []float32 {
		r, err := m.NewRun(1, len(ids))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Forward(ids, []int{len(ids)}); err != nil {
			t.Fatal(err)
		}
		out := make([]float32, len(ids)*2)
		m.be.Download(out, r.Logits())
		return out
	}
	t.Run("residual only", func(t *testing.T) {
		// x = e0 = (3,4); rms(x) = x/sqrt(12.5); logits = E·rms(x) = (25, 3)/sqrt(12.5).
		m := setup(t)
		got := logitsOf(t, m, []int32{0})
		s := math.Sqrt(12.5)
		if math.Abs(float64(got[0])-25/s) > 1e-6 || math.Abs(float64(got[1])-3/s) > 1e-6 {
			t.Fatalf("logits %v, want [%g %g]", got, 25/s, 3/s)
		}
	})
	t.Run("attention passes v bias", func(t *testing.T) {
		// With q,k,v weights zero, v = bias (1,-2) at every position and the
		// softmax weights sum to 1, so attention outputs (1,-2); o_proj = I
		// adds it to the residual: x = e1 + (1,-2) = (2,-2), rms = (1,-1)/1·...
		// mean(x²) = 4, rms(x) = (1,-1); logits = E·(1,-1) = (3-4, 1-0) = (-1, 1).
		m := setup(t)
		set(m, "model.layers.0.self_attn.v_proj.bias", 1, -2)
		set(m, "model.layers.0.self_attn.o_proj.weight", 1, 0, 0, 1)
		got := logitsOf(t, m, []int32{1, 1, 0})
		if math.Abs(float64(got[0])+1) > 1e-6 || math.Abs(float64(got[1])-1) > 1e-6 {
			t.Fatalf("logits %v, want [-1 1]", got[:2])
		}
	})
	t.Run("mlp", func(t *testing.T) {
		// gate = up = I, down = I: x = e1 = (1,0); n2 = rms(x) = (sqrt2, 0);
		// mlp = silu(sqrt2)·sqrt2 in dim 0; x = (1 + sqrt2·silu(sqrt2), 0).
		// rms of (a,0) is (sqrt2, 0) for a > 0; logits = (3 sqrt2, sqrt2).
		m := setup(t)
		for _, n := range []string{"gate_proj", "up_proj", "down_proj"} {
			set(m, "model.layers.0.mlp."+n+".weight", 1, 0, 0, 1)
		}
		got := logitsOf(t, m, []int32{1})
		if math.Abs(float64(got[0])-3*math.Sqrt2) > 1e-6 || math.Abs(float64(got[1])-math.Sqrt2) > 1e-6 {
			t.Fatalf("logits %v, want [%g %g]", got, 3*math.Sqrt2, math.Sqrt2)
		}
	})
}

// TestModelGradient checks the full backward against central differences
// of L = Σ w·logp on the float64 backend (h = 1e-5: truncation ~1e-10,
// rounding ~1e-11, so a relative tolerance of 1e-6 is ample yet catches
// any wrong term). Elements are sampled from every parameter tensor.
func TestModelGradient(t *testing.T) {
	for _, tc := range []struct {
		name       string
		tied, bias bool
		temp       float32
	}{
		{"qwen2-tied", true, true, 1},
		{"qwen2-untied-temp", false, true, 0.7},
		{"llama", true, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := newBackend64(t)
			cfg := tinyConfig(t, tc.tied, tc.bias)
			m := randomModel(t, be, cfg, 5)
			m.AllocGrads()
			ids, lens, targets := batch(cfg.VocabSize)
			r, err := m.NewRun(2, 6)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(9, 9))
			w := make([]float32, 12)
			for i := range w {
				w[i] = float32(rng.Float64()*2 - 1)
			}
			lp := make([]float32, 12)
			loss := func() float64 {
				if err := r.Forward(ids, lens); err != nil {
					t.Fatal(err)
				}
				// LogProbs rounds its output through float32, so the loss is
				// computed from the float64 tensor directly.
				if err := r.LogProbs(targets, tc.temp, lp); err != nil {
					t.Fatal(err)
				}
				v := make([]float64, 12)
				be.Download64(v, r.logp)
				var s float64
				for i := range v {
					s += float64(w[i]) * v[i]
				}
				return s
			}
			loss()
			m.ZeroGrads()
			if err := r.Backward(w); err != nil {
				t.Fatal(err)
			}
			for _, p := range m.params {
				g := make([]float64, p.Len())
				be.Download64(g, p.G)
				x := make([]float64, p.Len())
				be.Download64(x, p.W)
				for range 4 {
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
			// Gradients accumulate across Backward calls (micro-batches).
			before := m.GradNorm()
			loss()
			if err := r.Backward(w); err != nil {
				t.Fatal(err)
			}
			if after := m.GradNorm(); math.Abs(after-2*before) > 1e-9*before {
				t.Fatalf("second backward: grad norm %g, want %g", after, 2*before)
			}
		})
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	be := newBackend32(t)
	cfg := tinyConfig(t, false, true)
	m := randomModel(t, be, cfg, 3)
	ids, lens, targets := batch(cfg.VocabSize)
	score := func(m *Model) []float32 {
		r, err := m.NewRun(2, 6)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Forward(ids, lens); err != nil {
			t.Fatal(err)
		}
		lp := make([]float32, 12)
		if err := r.LogProbs(targets, 1, lp); err != nil {
			t.Fatal(err)
		}
		return lp
	}
	want := score(m)
	dir := t.TempDir()
	if err := m.Save(filepath.Join(dir, "f32"), safetensors.F32); err != nil {
		t.Fatal(err)
	}
	m2, err := Load(be, filepath.Join(dir, "f32"))
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range score(m2) {
		if math.Float32bits(v) != math.Float32bits(want[i]) {
			t.Fatalf("f32 round trip: logprob[%d] = %g, want %g bit-exactly", i, v, want[i])
		}
	}
	// BF16: every loaded weight equals the round-to-nearest-even of the
	// original, which is also what a second save/load preserves exactly.
	if err := m.Save(filepath.Join(dir, "bf16"), safetensors.BF16); err != nil {
		t.Fatal(err)
	}
	m3, err := Load(be, filepath.Join(dir, "bf16"))
	if err != nil {
		t.Fatal(err)
	}
	if m3.Cfg.Dtype != "bfloat16" {
		t.Fatalf("bf16 save wrote torch_dtype %q", m3.Cfg.Dtype)
	}
	P, P3 := paramsF64(m), paramsF64(m3)
	for name, v := range P {
		for i := range v {
			want := safetensors.BF16ToF32(safetensors.F32ToBF16(float32(v[i])))
			if float32(P3[name][i]) != want {
				t.Fatalf("%s[%d]: loaded %g, want bf16 rounding %g of %g", name, i, P3[name][i], want, v[i])
			}
		}
	}
}

func TestSaveCopiesTokenizerFiles(t *testing.T) {
	be := newBackend32(t)
	m := randomModel(t, be, tinyConfig(t, true, true), 6)
	a, b := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	if err := m.Save(a, safetensors.F32); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a, "tokenizer.json"), []byte(`{"x":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	m2, err := Load(be, a)
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Save(b, safetensors.BF16); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(b, "tokenizer.json"))
	if err != nil || string(got) != `{"x":1}` {
		t.Fatalf("tokenizer.json not copied: %q %v", got, err)
	}
	gc, err := os.ReadFile(filepath.Join(b, "generation_config.json"))
	if err != nil || !strings.Contains(string(gc), "63") { // tiny's EOS id
		t.Fatalf("generation_config.json: %q %v", gc, err)
	}
	// A tensor the config does not account for is an error, not ignored.
	ck, _ := safetensors.OpenDir(a)
	var ts []safetensors.Tensor
	for _, n := range ck.Names() {
		info, _ := ck.Info(n)
		data := make([]float32, info.Elems)
		if err := ck.ReadF32(n, data); err != nil {
			t.Fatal(err)
		}
		ts = append(ts, safetensors.Tensor{Name: n, Shape: info.Shape, Data: data})
	}
	ck.Close()
	ts = append(ts, safetensors.Tensor{Name: "model.layers.9.mlp.up_proj.weight", Shape: []int{1}, Data: []float32{1}})
	if err := safetensors.Write(filepath.Join(a, "model.safetensors"), ts, safetensors.F32, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(be, a); err == nil || !strings.Contains(err.Error(), "unexpected tensor") {
		t.Fatalf("err = %v, want unexpected tensor", err)
	}
}

func TestLoadSharded(t *testing.T) {
	be := newBackend32(t)
	cfg := tinyConfig(t, true, true)
	m := randomModel(t, be, cfg, 4)
	dir := t.TempDir()
	if err := m.Save(dir, safetensors.F32); err != nil {
		t.Fatal(err)
	}
	// Re-split the single file into two shards with an index, as HF does
	// for large models, and remove the single file.
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var s1, s2 []safetensors.Tensor
	wm := map[string]string{}
	for i, name := range ck.Names() {
		info, _ := ck.Info(name)
		data := make([]float32, info.Elems)
		if err := ck.ReadF32(name, data); err != nil {
			t.Fatal(err)
		}
		st := safetensors.Tensor{Name: name, Shape: info.Shape, Data: data}
		if i%2 == 0 {
			s1, wm[name] = append(s1, st), "model-00001-of-00002.safetensors"
		} else {
			s2, wm[name] = append(s2, st), "model-00002-of-00002.safetensors"
		}
	}
	ck.Close()
	if err := safetensors.Write(filepath.Join(dir, "model-00001-of-00002.safetensors"), s1, safetensors.BF16, nil); err != nil {
		t.Fatal(err)
	}
	if err := safetensors.Write(filepath.Join(dir, "model-00002-of-00002.safetensors"), s2, safetensors.F32, nil); err != nil {
		t.Fatal(err)
	}
	if err := safetensors.WriteIndex(dir, wm, 0); err != nil {
		t.Fatal(err)
	}
	m2, err := Load(be, dir)
	if err != nil {
		t.Fatal(err)
	}
	P, P2 := paramsF64(m), paramsF64(m2)
	for name, v := range P {
		bf := wm[name] == "model-00001-of-00002.safetensors"
		for i := range v {
			want := float32(v[i])
			if bf {
				want = safetensors.BF16ToF32(safetensors.F32ToBF16(want))
			}
			if float32(P2[name][i]) != want {
				t.Fatalf("%s[%d] = %g, want %g", name, i, P2[name][i], want)
			}
		}
	}
}

func TestCacheMatchesFullForward(t *testing.T) {
	for _, f64 := range []bool{true, false} {
		t.Run(fmt.Sprintf("f64=%v", f64), func(t *testing.T) {
			var be compute.Device = newBackend32(t)
			// Cache logits come back as float32 (relative rounding 6e-8), so
			// float64 runs compare at 1e-6; float32 runs also differ in
			// summation order between the two attention kernels.
			tol := 1e-4
			if f64 {
				be, tol = newBackend64(t), 1e-6
			}
			cfg := tinyConfig(t, true, true)
			m := randomModel(t, be, cfg, 8)
			V := cfg.VocabSize
			seqs := [][]int32{{3, 17, 5, 60, 1, 9, 2}, {42, 7, 7, 30, 11, 12, 13}}
			prompt := []int{3, 2} // prompt lengths; the rest is fed by Decode
			T := 7
			r, _ := m.NewRun(2, T)
			ids := append(append([]int32{}, seqs[0]...), seqs[1]...)
			if err := r.Forward(ids, []int{T, T}); err != nil {
				t.Fatal(err)
			}
			full := download(be, r.Logits())
			check := func(b, pos int, got []float32) {
				t.Helper()
				for j := range V {
					if math.Abs(float64(got[j])-full[(b*T+pos)*V+j]) > tol {
						t.Fatalf("seq %d pos %d logit %d: cache %g, full %g", b, pos, j, got[j], full[(b*T+pos)*V+j])
					}
				}
			}
			c, err := m.NewCache(2, 8)
			if err != nil {
				t.Fatal(err)
			}
			lg := make([]float32, V)
			for b := range 2 {
				if err := c.Prefill(b, seqs[b][:prompt[b]], lg); err != nil {
					t.Fatal(err)
				}
				check(b, prompt[b]-1, lg)
			}
			// Sequence 1 is behind sequence 0; catch it up by one prefill token
			// so both decode in lockstep from different positions.
			if err := c.Prefill(1, seqs[1][2:3], lg); err != nil {
				t.Fatal(err)
			}
			check(1, 2, lg)
			both := make([]float32, 2*V)
			for pos := 3; pos < T; pos++ {
				if err := c.Decode([]int32{seqs[0][pos], seqs[1][pos]}, both); err != nil {
					t.Fatal(err)
				}
				check(0, pos, both[:V])
				check(1, pos, both[V:])
			}
			if c.Len(0) != T || c.Len(1) != T {
				t.Fatalf("cache lengths %d %d", c.Len(0), c.Len(1))
			}
			if err := c.Decode([]int32{1, 1}, both); err != nil {
				t.Fatal(err)
			}
			if err := c.Decode([]int32{1, 1}, both); err == nil {
				t.Fatal("want error when the cache is full")
			}
		})
	}
}

func TestInputValidation(t *testing.T) {
	be := newBackend32(t)
	m := randomModel(t, be, tinyConfig(t, true, true), 1)
	r, _ := m.NewRun(1, 3)
	if err := r.Forward([]int32{1, 2, 64}, []int{3}); err == nil {
		t.Fatal("want error for id outside vocabulary")
	}
	if err := r.Forward([]int32{1, 2, 3}, []int{4}); err == nil {
		t.Fatal("want error for length past T")
	}
	if err := r.Forward([]int32{1, 2, 3}, []int{3}); err != nil {
		t.Fatal(err)
	}
	if err := r.LogProbs([]int32{1, 2, -1}, 0, make([]float32, 3)); err == nil {
		t.Fatal("want error for temperature 0")
	}
	if err := r.Backward(make([]float32, 3)); err == nil {
		t.Fatal("want error for backward before AllocGrads")
	}
}

func TestRejectsHugeConfig(t *testing.T) {
	cfg := tinyConfig(t, true, true)
	cfg.HiddenSize, cfg.IntermediateSize, cfg.VocabSize, cfg.NumLayers = 1<<20, 1<<22, 1<<20, 4000
	if _, err := New(newBackend32(t), cfg); err == nil {
		t.Fatal("want error for a config of ~10^16 parameters")
	}
}

func TestInitDeterministic(t *testing.T) {
	be := newBackend32(t)
	cfg := tinyConfig(t, true, true)
	a, _ := New(be, cfg)
	b, _ := New(be, cfg)
	a.Init(42, 0.02)
	b.Init(42, 0.02)
	Pa, Pb := paramsF64(a), paramsF64(b)
	for name, v := range Pa {
		for i := range v {
			if v[i] != Pb[name][i] {
				t.Fatalf("%s differs between equal seeds", name)
			}
		}
	}
	if Pa["model.norm.weight"][0] != 1 || Pa["model.layers.0.self_attn.q_proj.bias"][0] != 0 {
		t.Fatal("norms must start at 1 and biases at 0")
	}
}
