// Package model is the Qwen2 (and Llama-family) causal language model of
// transformers' modeling_qwen2.py, written llm.c-style: every layer has an
// explicit forward and backward next to each other, all parameters,
// gradients and activations are allocated up front from the config and the
// batch shape, and every op runs on a compute.Device.
//
// It provides the training forward (keeping activations), the full
// backward, log-probs of given targets with temperature, and a KV-cached
// forward for generation. It deliberately holds no optimiser state, no
// sampling and no tokenizer: those belong to the trainer, trainer/generate
// and trainer/tokenizer.
package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/rlhost/rlhost/trainer/compute"
	"github.com/rlhost/rlhost/trainer/hfconfig"
)

// Param is one named weight tensor in Hugging Face layout, with its
// gradient (nil until AllocGrads).
type Param struct {
	Name  string
	Shape []int
	W, G  compute.Tensor
}

// Len is the number of elements.
func (p *Param) Len() int {
	n := 1
	for _, d := range p.Shape {
		n *= d
	}
	return n
}

type layerParams struct {
	ln1, q, qb, k, kb, v, vb, o, ln2, gate, up, down *Param
}

// Model holds a model's parameters on a backend.
type Model struct {
	Cfg    *hfconfig.Config
	be     compute.Device
	params []*Param
	byName map[string]*Param
	embed  *Param
	norm   *Param
	lmHead *Param // == embed when tie_word_embeddings
	layers []layerParams
	// srcDir is the directory the model was loaded from, for copying
	// tokenizer and generation config files on Save.
	srcDir string
	// changed is set once the weights may differ from srcDir's (AllocGrads:
	// the model is being trained).
	changed bool
	// adapter is the model's own LoRA adapter (the policy's, in LoRA
	// training): runs and caches made later start with it attached.
	adapter *Adapter
}

// SetAdapter makes a the model's own adapter (nil: none). Runs and caches
// made after this call start with a attached; those made before are not
// changed. A trainer that trains a LoRA policy sets it before the server
// builds its cache, so generation samples from base + adapter. The base
// weights are untouched.
func (m *Model) SetAdapter(a *Adapter) error {
	if a != nil {
		if err := a.compatible(m); err != nil {
			return err
		}
	}
	m.adapter = a
	return nil
}

// ForgetDir makes Dir return "" from now on, for weights whose directory
// may go away (a checkpoint's copy, pruned later): savers then write the
// weights instead of referring to the directory. Tokenizer files are still
// copied from it on Save while it exists.
func (m *Model) ForgetDir() { m.changed = true }

// Adapter is the model's own adapter, or nil.
func (m *Model) Adapter() *Adapter { return m.adapter }

// Dir is the directory the model was loaded from while its weights are
// still the ones there: "" for a model made in memory, and once gradients
// were allocated for it (it is being trained).
func (m *Model) Dir() string {
	if m.changed {
		return ""
	}
	return m.srcDir
}

// New allocates a zero-initialised model of cfg on be.
func New(be compute.Device, cfg *hfconfig.Config) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	// A config is user input: refuse shapes no machine could hold before
	// allocating (1<<36 float32 parameters is 256 GiB).
	if n := cfg.NumParams(); n > 1<<36 {
		return nil, fmt.Errorf("model: config implies %d parameters, more than the supported %d", n, int64(1)<<36)
	}
	m := &Model{Cfg: cfg, be: be, byName: map[string]*Param{}}
	C, I, V := cfg.HiddenSize, cfg.IntermediateSize, cfg.VocabSize
	qd, kvd := cfg.NumHeads*cfg.HeadDim, cfg.NumKVHeads*cfg.HeadDim
	add := func(name string, shape ...int) *Param {
		p := &Param{Name: name, Shape: shape}
		p.W = be.Alloc(p.Len())
		m.params = append(m.params, p)
		m.byName[name] = p
		return p
	}
	m.embed = add("model.embed_tokens.weight", V, C)
	for l := range cfg.NumLayers {
		pre := fmt.Sprintf("model.layers.%d.", l)
		var lp layerParams
		lp.ln1 = add(pre+"input_layernorm.weight", C)
		lp.q = add(pre+"self_attn.q_proj.weight", qd, C)
		lp.k = add(pre+"self_attn.k_proj.weight", kvd, C)
		lp.v = add(pre+"self_attn.v_proj.weight", kvd, C)
		if cfg.AttentionBias {
			lp.qb = add(pre+"self_attn.q_proj.bias", qd)
			lp.kb = add(pre+"self_attn.k_proj.bias", kvd)
			lp.vb = add(pre+"self_attn.v_proj.bias", kvd)
		}
		lp.o = add(pre+"self_attn.o_proj.weight", C, qd)
		lp.ln2 = add(pre+"post_attention_layernorm.weight", C)
		lp.gate = add(pre+"mlp.gate_proj.weight", I, C)
		lp.up = add(pre+"mlp.up_proj.weight", I, C)
		lp.down = add(pre+"mlp.down_proj.weight", C, I)
		m.layers = append(m.layers, lp)
	}
	m.norm = add("model.norm.weight", C)
	m.lmHead = m.embed
	if !cfg.TieWordEmbeddings {
		m.lmHead = add("lm_head.weight", V, C)
	}
	return m, nil
}

// Init fills the parameters the way transformers' _init_weights does for a
// fresh model: linear and embedding weights ~ N(0, std), biases 0, norm
// weights 1. The draw is a function of seed only.
func (m *Model) Init(seed uint64, std float64) {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	var all []float32 // one host buffer for every parameter: no weights-sized garbage
	for _, p := range m.params {
		all = slices.Grow(all[:0], p.Len())
		buf := all[:p.Len()]
		clear(buf)
		switch {
		case len(p.Shape) == 2:
			for i := range buf {
				buf[i] = float32(r.NormFloat64() * std)
			}
		case isNorm(p.Name):
			for i := range buf {
				buf[i] = 1
			}
		}
		m.be.Upload(p.W, buf)
	}
}

func isNorm(name string) bool {
	n := len(name)
	return n > len("layernorm.weight") && name[n-len("layernorm.weight"):] == "layernorm.weight" || name == "model.norm.weight"
}

// Device is the compute device the model lives on.
func (m *Model) Device() compute.Device { return m.be }

// Params lists all parameters in checkpoint order (tied lm_head once).
func (m *Model) Params() []*Param { return m.params }

// Param returns the parameter called name.
func (m *Model) Param(name string) (*Param, bool) {
	p, ok := m.byName[name]
	return p, ok
}

// AllocGrads allocates zeroed gradient tensors (once).
func (m *Model) AllocGrads() {
	m.changed = true
	for _, p := range m.params {
		if p.G == nil {
			p.G = m.be.Alloc(p.Len())
		}
	}
}

// FreeGrads drops the gradient tensors, freezing the weights again: a
// Backward then computes no gradient for them (as for a LoRA base).
func (m *Model) FreeGrads() {
	for _, p := range m.params {
		p.G = nil
	}
}

// ZeroGrads sets all gradients to zero. Backward accumulates, so callers
// zero once per optimiser step and may run several micro-batches.
func (m *Model) ZeroGrads() {
	for _, p := range m.params {
		if p.G != nil {
			m.be.Zero(p.G)
		}
	}
}

// FlopsPerToken is the matmul work of a forward pass per token at context
// length t (2 flops per multiply-add, attention counted at t/2 average
// keys); a backward is twice that.
func (m *Model) FlopsPerToken(t int) float64 {
	c := m.Cfg
	C, I, V := float64(c.HiddenSize), float64(c.IntermediateSize), float64(c.VocabSize)
	qd, kvd := float64(c.NumHeads*c.HeadDim), float64(c.NumKVHeads*c.HeadDim)
	perLayer := 2*C*(qd+2*kvd) + 2*qd*C + 2*3*C*I + 2*2*qd*float64(t)/2
	return float64(c.NumLayers)*perLayer + 2*C*V
}

// Run holds the activations and scratch of training forward/backward
// passes over B sequences padded to T tokens. A Run is allocated once per
// batch shape and reused: Forward, LogProbs and Backward allocate nothing.
type Run struct {
	m    *Model
	B, T int
	N    int // B*T rows

	ids, pos, targets, lens compute.Ints
	hIDs, hPos, hTgt, hLens []int32
	hLensInt                []int
	invTemp                 float32

	// flash is the device's LSE attention when it asked for it at NewRun:
	// then each layer's att holds row log-sum-exps [B,hq,T], not
	// probabilities [B,hq,T,T].
	flash compute.LSEAttention

	res    []compute.Tensor // residual stream entering each layer, and after the last
	acts   []layerActs
	lnf    compute.Tensor
	rstdf  compute.Tensor
	logits compute.Tensor
	lse    compute.Tensor
	logp   compute.Tensor

	g *runGrads // allocated by the first Backward

	lora runLoRA // the attached adapter and its activations, if any
}

type layerActs struct {
	ln1, rstd1, q, k, v, att, ao, mid, ln2, rstd2, gate, up, h compute.Tensor
}

type runGrads struct {
	dres, dln, dq, dk, dv, dao, dgate, dup, dh, dlogp compute.Tensor
}

// NewRun allocates activations for batches of B sequences of up to T tokens.
func (m *Model) NewRun(B, T int) (*Run, error) {
	if B <= 0 || T <= 0 {
		return nil, fmt.Errorf("model: batch %dx%d must be positive", B, T)
	}
	c, be := m.Cfg, m.be
	N, C, I, V := B*T, c.HiddenSize, c.IntermediateSize, c.VocabSize
	qd, kvd := c.NumHeads*c.HeadDim, c.NumKVHeads*c.HeadDim
	r := &Run{m: m, B: B, T: T, N: N,
		ids: be.AllocInts(N), pos: be.AllocInts(N), targets: be.AllocInts(N), lens: be.AllocInts(B),
		hIDs: make([]int32, N), hPos: make([]int32, N), hTgt: make([]int32, N), hLens: make([]int32, B),
		hLensInt: make([]int, B),
		lnf:      be.Alloc(N * C), rstdf: be.Alloc(N), logits: be.Alloc(N * V), lse: be.Alloc(N), logp: be.Alloc(N),
	}
	if f, ok := be.(compute.LSEAttention); ok && f.LSEAttention() {
		r.flash = f
	}
	for l := 0; l <= c.NumLayers; l++ {
		r.res = append(r.res, be.Alloc(N*C))
	}
	if m.embed.G != nil || m.adapter != nil && m.adapter.params[0].G != nil {
		r.allocGrads() // up front when training, so the first step allocates no tensors either
	}
	for range c.NumLayers {
		r.acts = append(r.acts, layerActs{
			ln1: be.Alloc(N * C), rstd1: be.Alloc(N),
			q: be.Alloc(N * qd), k: be.Alloc(N * kvd), v: be.Alloc(N * kvd),
			att: be.Alloc(r.attLen()), ao: be.Alloc(N * qd),
			mid: be.Alloc(N * C), ln2: be.Alloc(N * C), rstd2: be.Alloc(N),
			gate: be.Alloc(N * I), up: be.Alloc(N * I), h: be.Alloc(N * I),
		})
	}
	if m.adapter != nil {
		if err := r.SetAdapter(m.adapter); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Forward runs the model over ids [B*T] (row-major, sequence b at rows
// b*T..b*T+T-1) where sequence b has lens[b] real tokens; the ids of the
// padding rows must still be valid ids (0 will do) and are ignored.
// It keeps every activation and leaves the logits for LogProbs.
func (r *Run) Forward(ids []int32, lens []int) error {
	m, be, c := r.m, r.m.be, r.m.Cfg
	if len(ids) != r.N || len(lens) != r.B {
		return fmt.Errorf("model: forward got %d ids and %d lengths for a %dx%d run", len(ids), len(lens), r.B, r.T)
	}
	for i, id := range ids {
		if id < 0 || int(id) >= c.VocabSize {
			return fmt.Errorf("model: token id %d at row %d outside vocabulary of %d", id, i, c.VocabSize)
		}
	}
	for b, n := range lens {
		if n < 0 || n > r.T {
			return fmt.Errorf("model: sequence %d length %d outside [0,%d]", b, n, r.T)
		}
		r.hLens[b] = int32(n)
		r.hLensInt[b] = n
		for t := range r.T {
			r.hPos[b*r.T+t] = int32(t)
		}
	}
	copy(r.hIDs, ids)
	be.UploadInts(r.ids, r.hIDs)
	be.UploadInts(r.pos, r.hPos)
	be.UploadInts(r.lens, r.hLens)

	N, C, I := r.N, c.HiddenSize, c.IntermediateSize
	hq, hkv, hd := c.NumHeads, c.NumKVHeads, c.HeadDim
	qd, kvd := hq*hd, hkv*hd
	eps := float32(c.RMSNormEps)

	r.lora.beginForward()
	be.Embed(r.res[0], m.embed.W, r.ids, N, C)
	for l, p := range m.layers {
		a, x := &r.acts[l], r.res[l]
		// Attention block: x + o_proj(attn(rope(q), rope(k), v)).
		be.RMSNorm(a.ln1, a.rstd1, x, p.ln1.W, N, C, eps)
		be.MatMul(a.q, a.ln1, p.q.W, N, qd, C, false, true, false)
		be.MatMul(a.k, a.ln1, p.k.W, N, kvd, C, false, true, false)
		be.MatMul(a.v, a.ln1, p.v.W, N, kvd, C, false, true, false)
		if p.qb != nil {
			be.AddBias(a.q, p.qb.W, N, qd)
			be.AddBias(a.k, p.kb.W, N, kvd)
			be.AddBias(a.v, p.vb.W, N, kvd)
		}
		if r.lora.ad != nil {
			r.loraForward(l, QProj, a.q, a.ln1)
			r.loraForward(l, KProj, a.k, a.ln1)
			r.loraForward(l, VProj, a.v, a.ln1)
		}
		be.RoPE(a.q, r.pos, N, hq, hd, c.RopeTheta)
		be.RoPE(a.k, r.pos, N, hkv, hd, c.RopeTheta)
		if r.flash != nil {
			r.flash.AttentionLSE(a.ao, a.att, a.q, a.k, a.v, r.lens, r.B, r.T, hq, hkv, hd)
		} else {
			be.Attention(a.ao, a.att, a.q, a.k, a.v, r.lens, r.B, r.T, hq, hkv, hd)
		}
		be.MatMul(a.mid, a.ao, p.o.W, N, C, qd, false, true, false)
		if r.lora.ad != nil {
			r.loraForward(l, OProj, a.mid, a.ao)
		}
		be.Accumulate(a.mid, x)
		// MLP block: mid + down(silu(gate(ln2)) * up(ln2)).
		be.RMSNorm(a.ln2, a.rstd2, a.mid, p.ln2.W, N, C, eps)
		be.MatMul(a.gate, a.ln2, p.gate.W, N, I, C, false, true, false)
		be.MatMul(a.up, a.ln2, p.up.W, N, I, C, false, true, false)
		if r.lora.ad != nil {
			r.loraForward(l, GateProj, a.gate, a.ln2)
			r.loraForward(l, UpProj, a.up, a.ln2)
		}
		be.SwiGLU(a.h, a.gate, a.up, N*I)
		be.MatMul(r.res[l+1], a.h, p.down.W, N, C, I, false, true, false)
		if r.lora.ad != nil {
			r.loraForward(l, DownProj, r.res[l+1], a.h)
		}
		be.Accumulate(r.res[l+1], a.mid)
	}
	be.RMSNorm(r.lnf, r.rstdf, r.res[c.NumLayers], m.norm.W, N, C, eps)
	be.MatMul(r.logits, r.lnf, m.lmHead.W, N, c.VocabSize, C, false, true, false)
	return nil
}

// Logits returns the [B*T, vocab] logits of the last Forward. Backward
// overwrites them with their gradient.
func (r *Run) Logits() compute.Tensor { return r.logits }

// LogProbs computes, after Forward, out[row] = log softmax(logits/T)[target]
// for every row whose target is >= 0 and that is not padding; other rows
// get 0. Usually targets[b*T+t] = ids[b*T+t+1] (the next token), and -1 at
// the last real token. temperature must be positive.
func (r *Run) LogProbs(targets []int32, temperature float32, out []float32) error {
	c := r.m.Cfg
	if len(targets) != r.N || len(out) != r.N {
		return fmt.Errorf("model: logprobs got %d targets and %d outputs for %d rows", len(targets), len(out), r.N)
	}
	if !(temperature > 0) {
		return fmt.Errorf("model: temperature %g must be positive", temperature)
	}
	for i, t := range targets {
		if int(t) >= c.VocabSize {
			return fmt.Errorf("model: target %d at row %d outside vocabulary of %d", t, i, c.VocabSize)
		}
		if i%r.T >= r.hLensInt[i/r.T] || t < 0 {
			t = -1
		}
		r.hTgt[i] = t
	}
	r.invTemp = 1 / temperature
	r.m.be.UploadInts(r.targets, r.hTgt)
	r.m.be.LogProbs(r.logp, r.lse, r.logits, r.targets, r.N, c.VocabSize, r.invTemp)
	r.m.be.Download(out, r.logp)
	return nil
}

func (r *Run) allocGrads() {
	if r.g != nil {
		return
	}
	be, c := r.m.be, r.m.Cfg
	N, C, I := r.N, c.HiddenSize, c.IntermediateSize
	qd, kvd := c.NumHeads*c.HeadDim, c.NumKVHeads*c.HeadDim
	r.g = &runGrads{
		dres: be.Alloc(N * C), dln: be.Alloc(N * C),
		dq: be.Alloc(N * qd), dk: be.Alloc(N * kvd), dv: be.Alloc(N * kvd), dao: be.Alloc(N * qd),
		dgate: be.Alloc(N * I), dup: be.Alloc(N * I), dh: be.Alloc(N * I), dlogp: be.Alloc(N),
	}
}

// Backward accumulates into the model's gradients d(Σ dlogp[row]·logp[row])
// with respect to every parameter, for the logp of the last LogProbs. A
// GRPO loss supplies dlogp = its derivative per token. The logits are
// overwritten.
func (r *Run) Backward(dlogp []float32) error {
	m, be, c := r.m, r.m.be, r.m.Cfg
	if len(dlogp) != r.N {
		return fmt.Errorf("model: backward got %d dlogp for %d rows", len(dlogp), r.N)
	}
	if m.embed.G == nil && !r.lora.trainable() {
		return fmt.Errorf("model: backward before AllocGrads (of the model or of its attached adapter)")
	}
	r.allocGrads()
	g := r.g
	N, C, I, V := r.N, c.HiddenSize, c.IntermediateSize, c.VocabSize
	hq, hkv, hd := c.NumHeads, c.NumKVHeads, c.HeadDim
	qd, kvd := hq*hd, hkv*hd

	be.Upload(g.dlogp, dlogp)
	if r.lora.sink != nil {
		be.Zero(r.lora.sink) // frozen norm weights' gradients land here and are dropped
	}
	// Head: logits = lnf·Wlmᵀ; lnf = norm(res[L]). dlogits replaces logits.
	be.LogProbsBackward(r.logits, g.dlogp, r.logits, r.lse, r.targets, N, V, r.invTemp)
	dlogits := r.logits
	be.MatMul(g.dln, dlogits, m.lmHead.W, N, C, V, false, false, false)
	if m.lmHead.G != nil {
		be.MatMul(m.lmHead.G, dlogits, r.lnf, V, C, N, true, false, true)
	}
	be.Zero(g.dres)
	be.RMSNormBackward(g.dres, r.gradOf(m.norm), g.dln, r.res[c.NumLayers], m.norm.W, r.rstdf, N, C)

	for l := c.NumLayers - 1; l >= 0; l-- {
		p, a := &m.layers[l], &r.acts[l]
		// g.dres holds dL/dres[l+1]. MLP block: res[l+1] = mid + down(h).
		be.MatMul(g.dh, g.dres, p.down.W, N, I, C, false, false, false)
		if p.down.G != nil {
			be.MatMul(p.down.G, g.dres, a.h, C, I, N, true, false, true)
		}
		if r.lora.ad != nil {
			r.loraBackward(l, DownProj, g.dh, g.dres, a.h)
		}
		be.Zero(g.dgate)
		be.Zero(g.dup)
		be.SwiGLUBackward(g.dgate, g.dup, g.dh, a.gate, a.up, N*I)
		be.MatMul(g.dln, g.dgate, p.gate.W, N, C, I, false, false, false)
		be.MatMul(g.dln, g.dup, p.up.W, N, C, I, false, false, true)
		if p.gate.G != nil {
			be.MatMul(p.gate.G, g.dgate, a.ln2, I, C, N, true, false, true)
			be.MatMul(p.up.G, g.dup, a.ln2, I, C, N, true, false, true)
		}
		if r.lora.ad != nil {
			r.loraBackward(l, GateProj, g.dln, g.dgate, a.ln2)
			r.loraBackward(l, UpProj, g.dln, g.dup, a.ln2)
		}
		be.RMSNormBackward(g.dres, r.gradOf(p.ln2), g.dln, a.mid, p.ln2.W, a.rstd2, N, C)
		// g.dres now holds dL/dmid. Attention block: mid = res[l] + o(ao).
		be.MatMul(g.dao, g.dres, p.o.W, N, qd, C, false, false, false)
		if p.o.G != nil {
			be.MatMul(p.o.G, g.dres, a.ao, C, qd, N, true, false, true)
		}
		if r.lora.ad != nil {
			r.loraBackward(l, OProj, g.dao, g.dres, a.ao)
		}
		be.Zero(g.dq)
		be.Zero(g.dk)
		be.Zero(g.dv)
		if r.flash != nil {
			r.flash.AttentionLSEBackward(g.dq, g.dk, g.dv, g.dao, a.ao, a.q, a.k, a.v, a.att, r.lens, r.B, r.T, hq, hkv, hd)
		} else {
			be.AttentionBackward(g.dq, g.dk, g.dv, g.dao, a.q, a.k, a.v, a.att, r.lens, r.B, r.T, hq, hkv, hd)
		}
		be.RoPEBackward(g.dq, r.pos, N, hq, hd, c.RopeTheta)
		be.RoPEBackward(g.dk, r.pos, N, hkv, hd, c.RopeTheta)
		if p.qb != nil && p.qb.G != nil {
			be.BiasBackward(p.qb.G, g.dq, N, qd)
			be.BiasBackward(p.kb.G, g.dk, N, kvd)
			be.BiasBackward(p.vb.G, g.dv, N, kvd)
		}
		be.MatMul(g.dln, g.dq, p.q.W, N, C, qd, false, false, false)
		be.MatMul(g.dln, g.dk, p.k.W, N, C, kvd, false, false, true)
		be.MatMul(g.dln, g.dv, p.v.W, N, C, kvd, false, false, true)
		if p.q.G != nil {
			be.MatMul(p.q.G, g.dq, a.ln1, qd, C, N, true, false, true)
			be.MatMul(p.k.G, g.dk, a.ln1, kvd, C, N, true, false, true)
			be.MatMul(p.v.G, g.dv, a.ln1, kvd, C, N, true, false, true)
		}
		if r.lora.ad != nil {
			r.loraBackward(l, QProj, g.dln, g.dq, a.ln1)
			r.loraBackward(l, KProj, g.dln, g.dk, a.ln1)
			r.loraBackward(l, VProj, g.dln, g.dv, a.ln1)
		}
		be.RMSNormBackward(g.dres, r.gradOf(p.ln1), g.dln, r.res[l], p.ln1.W, a.rstd1, N, C)
	}
	if m.embed.G != nil {
		be.EmbedBackward(m.embed.G, g.dres, r.ids, N, C)
	}
	return nil
}

// GradNorm returns the global L2 norm of all gradients.
func (m *Model) GradNorm() float64 {
	var s float64
	for _, p := range m.params {
		if p.G != nil {
			s += m.be.SumSquares(p.G)
		}
	}
	return math.Sqrt(s)
}

// attLen is the size of a layer's att: probabilities [B,hq,T,T], or row
// log-sum-exps [B,hq,T] under LSE attention.
func (r *Run) attLen() int {
	if r.flash != nil {
		return r.B * r.m.Cfg.NumHeads * r.T
	}
	return r.B * r.m.Cfg.NumHeads * r.T * r.T
}
