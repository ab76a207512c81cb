package model

import (
	"fmt"

	"github.com/rlhost/rlhost/trainer/backend"
)

// Cache is the KV cache and scratch for generating from B sequences of up
// to maxT tokens each. Prefill appends a prompt to one sequence; Decode
// appends one token to every sequence. Both return next-token logits.
type Cache struct {
	m       *Model
	B, maxT int
	rows    int   // scratch capacity in rows: max(B, maxT)
	n       []int // tokens held per sequence

	k, v []backend.Tensor // per layer [B, maxT, kvHeads*headDim]

	x, ln, rstd, q, kk, vv, ao, mid, gate, up, h backend.Tensor
	lnl, rstdl, logits                           backend.Tensor
	ids, pos, start                              backend.Ints
	hIDs, hPos, hStart                           []int32
}

// NewCache allocates a KV cache for B sequences of up to maxT tokens.
func (m *Model) NewCache(B, maxT int) (*Cache, error) {
	c := m.Cfg
	if B <= 0 || maxT <= 0 {
		return nil, fmt.Errorf("model: cache %dx%d must be positive", B, maxT)
	}
	if c.MaxPositions > 0 && maxT > c.MaxPositions {
		return nil, fmt.Errorf("model: cache length %d exceeds max_position_embeddings %d", maxT, c.MaxPositions)
	}
	be := m.be
	R := max(B, maxT)
	C, I, V := c.HiddenSize, c.IntermediateSize, c.VocabSize
	qd, kvd := c.NumHeads*c.HeadDim, c.NumKVHeads*c.HeadDim
	k := &Cache{m: m, B: B, maxT: maxT, rows: R, n: make([]int, B),
		x: be.Alloc(R * C), ln: be.Alloc(R * C), rstd: be.Alloc(R),
		q: be.Alloc(R * qd), kk: be.Alloc(R * kvd), vv: be.Alloc(R * kvd), ao: be.Alloc(R * qd),
		mid: be.Alloc(R * C), gate: be.Alloc(R * I), up: be.Alloc(R * I), h: be.Alloc(R * I),
		lnl: be.Alloc(B * C), rstdl: be.Alloc(B), logits: be.Alloc(B * V),
		ids: be.AllocInts(R), pos: be.AllocInts(R), start: be.AllocInts(B),
		hIDs: make([]int32, R), hPos: make([]int32, R), hStart: make([]int32, B),
	}
	for range c.NumLayers {
		k.k = append(k.k, be.Alloc(B*maxT*kvd))
		k.v = append(k.v, be.Alloc(B*maxT*kvd))
	}
	return k, nil
}

// Len is the number of tokens sequence b holds.
func (k *Cache) Len(b int) int { return k.n[b] }

// Reset empties every sequence (the memory is kept).
func (k *Cache) Reset() { clear(k.n) }

// Prefill appends ids to sequence b and writes the logits [vocab] for the
// token after the last of them into logits.
func (k *Cache) Prefill(b int, ids []int32, logits []float32) error {
	if b < 0 || b >= k.B {
		return fmt.Errorf("model: prefill of sequence %d in a cache of %d", b, k.B)
	}
	if len(ids) == 0 {
		return fmt.Errorf("model: prefill of sequence %d with no tokens", b)
	}
	return k.step(b, 1, len(ids), ids, logits)
}

// Decode appends ids[b] to every sequence b and writes next-token logits
// [B, vocab] into logits.
func (k *Cache) Decode(ids []int32, logits []float32) error {
	if len(ids) != k.B {
		return fmt.Errorf("model: decode got %d ids for %d sequences", len(ids), k.B)
	}
	return k.step(0, k.B, 1, ids, logits)
}

// step runs sequences b0..b0+nb-1, tq new tokens each. Either nb == 1
// (prefill) or tq == 1 (decode), so the rows whose logits are wanted are
// contiguous: the last row, or all rows.
func (k *Cache) step(b0, nb, tq int, ids []int32, logits []float32) error {
	m, be, c := k.m, k.m.be, k.m.Cfg
	rows := nb * tq
	if len(logits) != nb*c.VocabSize {
		return fmt.Errorf("model: logits buffer of %d, want %d", len(logits), nb*c.VocabSize)
	}
	for i := range nb {
		if k.n[b0+i]+tq > k.maxT {
			return fmt.Errorf("model: sequence %d would hold %d tokens, cache holds %d", b0+i, k.n[b0+i]+tq, k.maxT)
		}
		k.hStart[i] = int32(k.n[b0+i])
		for j := range tq {
			id := ids[i*tq+j]
			if id < 0 || int(id) >= c.VocabSize {
				return fmt.Errorf("model: token id %d outside vocabulary of %d", id, c.VocabSize)
			}
			k.hIDs[i*tq+j] = id
			k.hPos[i*tq+j] = int32(k.n[b0+i] + j)
		}
	}
	C, I, V := c.HiddenSize, c.IntermediateSize, c.VocabSize
	hq, hkv, hd := c.NumHeads, c.NumKVHeads, c.HeadDim
	qd, kvd := hq*hd, hkv*hd
	eps := float32(c.RMSNormEps)
	idv, posv, stv := be.ViewInts(k.ids, 0, rows), be.ViewInts(k.pos, 0, rows), be.ViewInts(k.start, 0, nb)
	be.UploadInts(idv, k.hIDs[:rows])
	be.UploadInts(posv, k.hPos[:rows])
	be.UploadInts(stv, k.hStart[:nb])
	view := func(t backend.Tensor, w int) backend.Tensor { return be.View(t, 0, rows*w) }
	x, ln, rstd, mid := view(k.x, C), view(k.ln, C), view(k.rstd, 1), view(k.mid, C)
	q, kk, vv, ao := view(k.q, qd), view(k.kk, kvd), view(k.vv, kvd), view(k.ao, qd)
	gate, up, h := view(k.gate, I), view(k.up, I), view(k.h, I)

	be.Embed(x, m.embed.W, idv, rows, C)
	for l, p := range m.layers {
		kc := be.View(k.k[l], b0*k.maxT*kvd, nb*k.maxT*kvd)
		vc := be.View(k.v[l], b0*k.maxT*kvd, nb*k.maxT*kvd)
		be.RMSNorm(ln, rstd, x, p.ln1.W, rows, C, eps)
		be.MatMul(q, ln, p.q.W, rows, qd, C, false, true, false)
		be.MatMul(kk, ln, p.k.W, rows, kvd, C, false, true, false)
		be.MatMul(vv, ln, p.v.W, rows, kvd, C, false, true, false)
		if p.qb != nil {
			be.AddBias(q, p.qb.W, rows, qd)
			be.AddBias(kk, p.kb.W, rows, kvd)
			be.AddBias(vv, p.vb.W, rows, kvd)
		}
		be.RoPE(q, posv, rows, hq, hd, c.RopeTheta)
		be.RoPE(kk, posv, rows, hkv, hd, c.RopeTheta)
		be.WriteCache(kc, kk, stv, nb, tq, k.maxT, kvd)
		be.WriteCache(vc, vv, stv, nb, tq, k.maxT, kvd)
		be.AttentionCached(ao, q, kc, vc, stv, nb, tq, k.maxT, hq, hkv, hd)
		be.MatMul(mid, ao, p.o.W, rows, C, qd, false, true, false)
		be.Accumulate(mid, x)
		be.RMSNorm(ln, rstd, mid, p.ln2.W, rows, C, eps)
		be.MatMul(gate, ln, p.gate.W, rows, I, C, false, true, false)
		be.MatMul(up, ln, p.up.W, rows, I, C, false, true, false)
		be.SwiGLU(h, gate, up, rows*I)
		be.MatMul(x, h, p.down.W, rows, C, I, false, true, false)
		be.Accumulate(x, mid)
	}
	last := be.View(k.x, (rows-nb)*C, nb*C) // nb == 1: last row; tq == 1: all rows
	lnl, rstdl, lg := be.View(k.lnl, 0, nb*C), be.View(k.rstdl, 0, nb), be.View(k.logits, 0, nb*V)
	be.RMSNorm(lnl, rstdl, last, m.norm.W, nb, C, eps)
	be.MatMul(lg, lnl, m.lmHead.W, nb, V, C, false, true, false)
	be.Download(logits, lg)
	for i := range nb {
		k.n[b0+i] += tq
	}
	return nil
}
