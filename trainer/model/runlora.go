package model

import (
	"math/rand/v2"

	"github.com/rlhost/rlhost/trainer/compute"
)

// runLoRA is a Run's attached adapter and the activations its backward
// needs: per layer and targeted projection u = scale·x·Aᵀ [N, r], and the
// dropped input when dropout is on.
type runLoRA struct {
	ad       *Adapter
	training bool // dropout on (the adapter's Dropout > 0 and SetTraining(true))
	u        [][numModules]compute.Tensor
	xd       [][numModules]compute.Tensor // nil unless the adapter has dropout
	du       compute.Tensor               // [N, r] scratch
	dxs      compute.Tensor               // [N, maxIn] scratch for the dropout backward
	host     []float32                    // [N·maxIn] host buffer for dropout masks
	sink     compute.Tensor               // gradient sink for a frozen base's norm weights
	seed     uint64                       // dropout seed of the last Forward
	dropping bool                         // the last Forward applied dropout
}

func (l *runLoRA) trainable() bool {
	return l.ad != nil && len(l.ad.params) > 0 && l.ad.params[0].G != nil
}

func (l *runLoRA) beginForward() {
	l.dropping = l.ad != nil && l.training && l.ad.Cfg.Dropout > 0
	if l.dropping {
		l.ad.dropSeed++
		l.seed = l.ad.dropSeed
	}
}

// SetAdapter attaches a LoRA adapter to the run (nil detaches it):
// Forward then computes base + adapter and Backward accumulates the
// adapter's gradients (when it has them, see Adapter.AllocGrads) and the
// base's only where the base has gradients allocated, so a base without
// AllocGrads stays frozen and costs no gradient memory. Attach before
// taking runs with Within; those share the attachment of the run at the
// time they are taken.
func (r *Run) SetAdapter(a *Adapter) error {
	if a == nil {
		r.lora.ad = nil
		return nil
	}
	if err := a.compatible(r.m); err != nil {
		return err
	}
	if r.lora.ad != nil && r.lora.ad.Cfg.Rank == a.Cfg.Rank && sameTargets(r.lora.ad, a) && (a.Cfg.Dropout > 0) == (r.lora.xd != nil) {
		r.lora.ad = a
		return nil
	}
	be, N, rank := r.m.be, r.N, a.Cfg.Rank
	l := runLoRA{ad: a, training: r.lora.training,
		du: be.Alloc(N * rank), sink: be.Alloc(r.m.Cfg.HiddenSize)}
	for li := range r.m.Cfg.NumLayers {
		var u, xd [numModules]compute.Tensor
		for _, mod := range a.Cfg.Targets {
			u[mod] = be.Alloc(N * rank)
			if a.Cfg.Dropout > 0 {
				xd[mod] = be.Alloc(N * a.layers[li][mod].In)
			}
		}
		l.u = append(l.u, u)
		if a.Cfg.Dropout > 0 {
			l.xd = append(l.xd, xd)
		}
	}
	if a.Cfg.Dropout > 0 {
		l.dxs = be.Alloc(N * a.maxIn)
		l.host = make([]float32, N*a.maxIn)
	}
	r.lora = l
	return nil
}

func sameTargets(a, b *Adapter) bool {
	if len(a.Cfg.Targets) != len(b.Cfg.Targets) {
		return false
	}
	for i := range a.Cfg.Targets {
		if a.Cfg.Targets[i] != b.Cfg.Targets[i] {
			return false
		}
	}
	return true
}

// Adapter is the attached adapter, or nil.
func (r *Run) Adapter() *Adapter { return r.lora.ad }

// SetTraining turns the adapter's dropout on or off for later Forwards
// (off by default: log-probs for sampling and scoring use no dropout).
func (r *Run) SetTraining(on bool) { r.lora.training = on }

// gradOf is p's gradient, or a scratch sink when p is frozen (the norm
// backward always writes a weight gradient).
func (r *Run) gradOf(p *Param) compute.Tensor {
	if p.G != nil {
		return p.G
	}
	return r.lora.sink
}

// dropSeed is the mask seed of layer l's projection mod in the last Forward.
func (l *runLoRA) dropSeed(layer int, mod Module) uint64 {
	return l.seed*0x9e3779b97f4a7c15 + uint64(layer)*uint64(numModules) + uint64(mod)
}

func (r *Run) loraForward(layer int, mod Module, y, x compute.Tensor) {
	l := &r.lora
	lo := l.ad.layers[layer][mod]
	if lo == nil {
		return
	}
	be := r.m.be
	if l.dropping {
		l.mask(l.xd[layer][mod], x, r.N*lo.In, l.dropSeed(layer, mod))
		x = l.xd[layer][mod]
	}
	lo.forward(be, y, x, l.u[layer][mod], r.N, l.ad.Cfg.Rank, l.ad.scale)
}

func (r *Run) loraBackward(layer int, mod Module, dx, dy, x compute.Tensor) {
	l := &r.lora
	lo := l.ad.layers[layer][mod]
	if lo == nil {
		return
	}
	be, rank := r.m.be, l.ad.Cfg.Rank
	if !l.dropping {
		lo.backward(be, dx, dy, x, l.u[layer][mod], l.du, r.N, rank, l.ad.scale)
		return
	}
	// Dropout: the factors saw the dropped input, and the input's gradient
	// through the adapter passes the same mask.
	n := r.N * lo.In
	tmp := be.View(l.dxs, 0, n)
	be.Zero(tmp)
	lo.backward(be, tmp, dy, l.xd[layer][mod], l.u[layer][mod], l.du, r.N, rank, l.ad.scale)
	l.mask(tmp, tmp, n, l.dropSeed(layer, mod))
	be.Accumulate(dx, tmp)
}

// mask sets dst = mask(seed) ⊙ src over n elements on the host (there is
// no elementwise-product op on the device; dropout is off by default).
// float64 devices keep full precision, so gradient checks stay exact.
func (l *runLoRA) mask(dst, src compute.Tensor, n int, seed uint64) {
	be, p := l.ad.be, l.ad.Cfg.Dropout
	if f, ok := be.(compute.Float64IO); ok {
		h := make([]float64, n)
		f.Download64(h, src)
		applyMask(h, p, seed)
		f.Upload64(dst, h)
		return
	}
	h := l.host[:n]
	be.Download(h, src)
	applyMask(h, p, seed)
	be.Upload(dst, h)
}

// applyMask multiplies x in place by the inverted-dropout mask of seed:
// each element is zeroed with probability p, the rest scaled by 1/(1-p),
// as torch.nn.Dropout does in training. The same seed gives the same mask.
func applyMask[T float32 | float64](x []T, p float64, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0xda3e39cb94b95bdb))
	keep := T(1 / (1 - p))
	for i := range x {
		if rng.Float64() < p {
			x[i] = 0
		} else {
			x[i] *= keep
		}
	}
}

// SetAdapter attaches a LoRA adapter to the cache (nil detaches it):
// later Forward, Prefill and Decode compute base + adapter for every slot
// they name. The keys and values already cached were computed with
// whatever adapter was attached then; a server that serves several
// adapters keeps each slot's adapter fixed for the slot's life and groups
// the slots of one adapter into one Forward.
func (k *Cache) SetAdapter(a *Adapter) error {
	if a == nil {
		k.ad = nil
		return nil
	}
	if err := a.compatible(k.m); err != nil {
		return err
	}
	if need := k.rows * a.Cfg.Rank; k.u == nil || k.u.Len() < need {
		k.u = k.m.be.Alloc(need)
	}
	k.ad = a
	return nil
}

// Adapter is the attached adapter, or nil.
func (k *Cache) Adapter() *Adapter { return k.ad }

func (k *Cache) loraForward(layer int, mod Module, y, x compute.Tensor, rows int) {
	lo := k.ad.layers[layer][mod]
	if lo == nil {
		return
	}
	r := k.ad.Cfg.Rank
	u := k.m.be.View(k.u, 0, rows*r)
	k.linear(u, x, lo.A.W, rows, r, lo.In, false)
	k.m.be.Scale(u, k.ad.scale)
	k.linear(y, u, lo.B.W, rows, lo.Out, r, true)
}
