package model

import (
	"fmt"

	"github.com/rlhost/rlhost/trainer/compute"
)

// Within returns a Run for batches of B sequences of up to T tokens
// (B ≤ r.B, T ≤ r.T) whose tensors are views of the leading parts of r's:
// a smaller batch then costs B·T rows of work, not r.B·r.T, and allocates
// no tensors. r and every Run taken from it share memory, so using one
// overwrites the activations of the others; use them one at a time, with
// Forward, LogProbs and Backward of a batch on the same Run.
func (r *Run) Within(B, T int) (*Run, error) {
	if B <= 0 || T <= 0 || B > r.B || T > r.T {
		return nil, fmt.Errorf("model: run %dx%d does not fit in %dx%d", B, T, r.B, r.T)
	}
	if B == r.B && T == r.T {
		return r, nil
	}
	be := r.m.be
	N := B * T
	s := &Run{m: r.m, B: B, T: T, N: N,
		ids: be.ViewInts(r.ids, 0, N), pos: be.ViewInts(r.pos, 0, N), targets: be.ViewInts(r.targets, 0, N),
		lens: be.ViewInts(r.lens, 0, B),
		hIDs: r.hIDs[:N], hPos: r.hPos[:N], hTgt: r.hTgt[:N], hLens: r.hLens[:B], hLensInt: r.hLensInt[:B],
		flash: r.flash,
	}
	c := r.m.Cfg
	C, I, V := c.HiddenSize, c.IntermediateSize, c.VocabSize
	qd, kvd := c.NumHeads*c.HeadDim, c.NumKVHeads*c.HeadDim
	s.lnf, s.rstdf = be.View(r.lnf, 0, N*C), be.View(r.rstdf, 0, N)
	s.logits, s.lse, s.logp = be.View(r.logits, 0, N*V), be.View(r.lse, 0, N), be.View(r.logp, 0, N)
	for _, x := range r.res {
		s.res = append(s.res, be.View(x, 0, N*C))
	}
	for _, a := range r.acts {
		s.acts = append(s.acts, layerActs{
			ln1: be.View(a.ln1, 0, N*C), rstd1: be.View(a.rstd1, 0, N),
			q: be.View(a.q, 0, N*qd), k: be.View(a.k, 0, N*kvd), v: be.View(a.v, 0, N*kvd),
			att: be.View(a.att, 0, s.attLen()), ao: be.View(a.ao, 0, N*qd),
			mid: be.View(a.mid, 0, N*C), ln2: be.View(a.ln2, 0, N*C), rstd2: be.View(a.rstd2, 0, N),
			gate: be.View(a.gate, 0, N*I), up: be.View(a.up, 0, N*I), h: be.View(a.h, 0, N*I),
		})
	}
	if g := r.g; g != nil {
		s.g = &runGrads{
			dres: be.View(g.dres, 0, N*C), dln: be.View(g.dln, 0, N*C),
			dq: be.View(g.dq, 0, N*qd), dk: be.View(g.dk, 0, N*kvd), dv: be.View(g.dv, 0, N*kvd), dao: be.View(g.dao, 0, N*qd),
			dgate: be.View(g.dgate, 0, N*I), dup: be.View(g.dup, 0, N*I), dh: be.View(g.dh, 0, N*I), dlogp: be.View(g.dlogp, 0, N),
		}
	}
	if l := r.lora; l.ad != nil {
		rank := l.ad.Cfg.Rank
		s.lora = runLoRA{ad: l.ad, training: l.training, du: be.View(l.du, 0, N*rank), sink: l.sink, host: l.host}
		if l.dxs != nil {
			s.lora.dxs = be.View(l.dxs, 0, N*l.ad.maxIn)
		}
		for li := range l.u {
			var u, xd [numModules]compute.Tensor
			for _, mod := range l.ad.Cfg.Targets {
				u[mod] = be.View(l.u[li][mod], 0, N*rank)
				if l.xd != nil {
					xd[mod] = be.View(l.xd[li][mod], 0, N*l.ad.layers[li][mod].In)
				}
			}
			s.lora.u = append(s.lora.u, u)
			if l.xd != nil {
				s.lora.xd = append(s.lora.xd, xd)
			}
		}
	}
	return s, nil
}
