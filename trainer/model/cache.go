package model

import (
	"fmt"

	"github.com/rlhost/rlhost/trainer/compute"
)

// Cache is the KV cache and scratch for generating from B sequences (slots)
// of up to maxT tokens each. Forward appends tokens to any subset of the
// slots in one packed pass: every slot's new rows go through the same
// matmuls, so a batch of prompts is prefilled together and decode touches
// only the slots named. Prefill and Decode are the one-slot and all-slot
// shorthands.
type Cache struct {
	m       *Model
	B, maxT int
	rows    int   // scratch capacity in rows: max(B, maxT)
	n       []int // tokens held per sequence

	k, v []compute.Tensor // per layer [B, maxT, kvHeads*headDim]

	x, ln, rstd, q, kk, vv, ao, mid, gate, up, h compute.Tensor
	last, lnl, rstdl, logits                     compute.Tensor
	ids, pos, start, lastRow                     compute.Ints
	hIDs, hPos, hStart, hLast                    []int32
	busy                                         []bool // slot named in the current Forward

	ad *Adapter       // attached LoRA adapter, or nil
	u  compute.Tensor // [rows, rank] adapter scratch

	rowLinear compute.RowLinear // the device's batch-invariant x·Wᵀ, if it has one
}

// Chunk is one slot's part of a Forward: the tokens appended to it.
type Chunk struct {
	Slot int
	IDs  []int32
}

// NewCache allocates a KV cache for B sequences of up to maxT tokens,
// with scratch for max(B, maxT) rows per Forward.
func (m *Model) NewCache(B, maxT int) (*Cache, error) {
	return m.NewPackedCache(B, maxT, max(B, maxT))
}

// NewPackedCache is NewCache with scratch for rows tokens per Forward
// (at least max(B, maxT)), so a server can pack a full-length prompt next
// to a decode row of every slot.
func (m *Model) NewPackedCache(B, maxT, rows int) (*Cache, error) {
	c := m.Cfg
	if B <= 0 || maxT <= 0 {
		return nil, fmt.Errorf("model: cache %dx%d must be positive", B, maxT)
	}
	if c.MaxPositions > 0 && maxT > c.MaxPositions {
		return nil, fmt.Errorf("model: cache length %d exceeds max_position_embeddings %d", maxT, c.MaxPositions)
	}
	be := m.be
	R := max(B, maxT, rows)
	C, I, V := c.HiddenSize, c.IntermediateSize, c.VocabSize
	qd, kvd := c.NumHeads*c.HeadDim, c.NumKVHeads*c.HeadDim
	k := &Cache{m: m, B: B, maxT: maxT, rows: R, n: make([]int, B),
		x: be.Alloc(R * C), ln: be.Alloc(R * C), rstd: be.Alloc(R),
		q: be.Alloc(R * qd), kk: be.Alloc(R * kvd), vv: be.Alloc(R * kvd), ao: be.Alloc(R * qd),
		mid: be.Alloc(R * C), gate: be.Alloc(R * I), up: be.Alloc(R * I), h: be.Alloc(R * I),
		last: be.Alloc(B * C), lnl: be.Alloc(B * C), rstdl: be.Alloc(B), logits: be.Alloc(B * V),
		ids: be.AllocInts(R), pos: be.AllocInts(R), start: be.AllocInts(B), lastRow: be.AllocInts(B),
		hIDs: make([]int32, R), hPos: make([]int32, R), hStart: make([]int32, B), hLast: make([]int32, B),
		busy: make([]bool, B),
	}
	k.rowLinear, _ = be.(compute.RowLinear)
	for range c.NumLayers {
		k.k = append(k.k, be.Alloc(B*maxT*kvd))
		k.v = append(k.v, be.Alloc(B*maxT*kvd))
	}
	if m.adapter != nil {
		if err := k.SetAdapter(m.adapter); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// linear computes y (+)= x·wᵀ for x [rows,in] and w [out,in]. On a device
// with batch-invariant rows (compute.RowLinear) each row's result does not
// depend on the other rows of the forward, so a sequence generates the
// same tokens whatever it is batched with, and a prefix's keys and values
// are the same whether computed in a prompt's prefill or token by token.
func (k *Cache) linear(y, x, w compute.Tensor, rows, out, in int, acc bool) {
	if k.rowLinear != nil {
		k.rowLinear.LinearRows(y, x, w, rows, out, in, acc)
		return
	}
	k.m.be.MatMul(y, x, w, rows, out, in, false, true, acc)
}

// Slots is the number of sequences the cache holds (B).
func (k *Cache) Slots() int { return k.B }

// MaxLen is the most tokens one sequence may hold (maxT).
func (k *Cache) MaxLen() int { return k.maxT }

// Rows is the most tokens one Forward may carry over all its chunks.
func (k *Cache) Rows() int { return k.rows }

// Len is the number of tokens sequence b holds.
func (k *Cache) Len(b int) int { return k.n[b] }

// Reset empties every sequence (the memory is kept).
func (k *Cache) Reset() { clear(k.n) }

// Truncate keeps the first n tokens of sequence b (0 frees the slot).
func (k *Cache) Truncate(b, n int) error {
	if b < 0 || b >= k.B || n < 0 || n > k.n[b] {
		return fmt.Errorf("model: truncate sequence %d of %d to %d tokens (holds %d)", b, k.B, n, k.Len(max(0, min(b, k.B-1))))
	}
	k.n[b] = n
	return nil
}

// CopyPrefix makes sequence dst hold the first n tokens of sequence src
// (their keys and values), so a prompt shared by several samples is
// prefilled once.
func (k *Cache) CopyPrefix(dst, src, n int) error {
	if dst < 0 || dst >= k.B || src < 0 || src >= k.B || n < 0 || n > k.n[src] {
		return fmt.Errorf("model: copy %d tokens of sequence %d (holds %d) to %d in a cache of %d", n, src, k.Len(max(0, min(src, k.B-1))), dst, k.B)
	}
	if dst != src && n > 0 {
		be, kvd := k.m.be, k.m.Cfg.NumKVHeads*k.m.Cfg.HeadDim
		for l := range k.k {
			be.Copy(be.View(k.k[l], dst*k.maxT*kvd, n*kvd), be.View(k.k[l], src*k.maxT*kvd, n*kvd))
			be.Copy(be.View(k.v[l], dst*k.maxT*kvd, n*kvd), be.View(k.v[l], src*k.maxT*kvd, n*kvd))
		}
	}
	k.n[dst] = n
	return nil
}

// Prefill appends ids to sequence b and writes the logits [vocab] for the
// token after the last of them into logits.
func (k *Cache) Prefill(b int, ids []int32, logits []float32) error {
	return k.Forward([]Chunk{{Slot: b, IDs: ids}}, logits)
}

// Decode appends ids[b] to every sequence b and writes next-token logits
// [B, vocab] into logits.
func (k *Cache) Decode(ids []int32, logits []float32) error {
	if len(ids) != k.B {
		return fmt.Errorf("model: decode got %d ids for %d sequences", len(ids), k.B)
	}
	ch := make([]Chunk, k.B)
	for b := range ch {
		ch[b] = Chunk{Slot: b, IDs: ids[b : b+1]}
	}
	return k.Forward(ch, logits)
}

// Forward appends each chunk's ids to its slot (slots distinct, at most
// Rows tokens in all) and writes the logits [vocab] of the token after
// each chunk's last id into logits[i*vocab:(i+1)*vocab]. The matmuls run
// once over all rows; attention runs per run of adjacent slots with equal
// chunk lengths, so a decode over slots 0..n-1 is one call.
func (k *Cache) Forward(chunks []Chunk, logits []float32) error {
	if len(logits) != len(chunks)*k.m.Cfg.VocabSize {
		return fmt.Errorf("model: logits buffer of %d, want %d", len(logits), len(chunks)*k.m.Cfg.VocabSize)
	}
	lg, err := k.ForwardLogits(chunks)
	if err != nil {
		return err
	}
	k.m.be.Download(logits, lg)
	return nil
}

// ForwardLogits is Forward leaving the logits [len(chunks), vocab] on the
// device, in the cache's own buffer (valid until the next forward), for a
// device that samples where they are (compute.TokenSampler).
func (k *Cache) ForwardLogits(chunks []Chunk) (compute.Tensor, error) {
	m, be, c := k.m, k.m.be, k.m.Cfg
	nc := len(chunks)
	if nc == 0 {
		return nil, fmt.Errorf("model: forward with no chunks")
	}
	defer clear(k.busy)
	rows := 0
	for i, ch := range chunks {
		b, tq := ch.Slot, len(ch.IDs)
		if b < 0 || b >= k.B {
			return nil, fmt.Errorf("model: sequence %d in a cache of %d", b, k.B)
		}
		if k.busy[b] {
			return nil, fmt.Errorf("model: sequence %d named twice in one forward", b)
		}
		k.busy[b] = true
		if tq == 0 {
			return nil, fmt.Errorf("model: sequence %d given no tokens", b)
		}
		if k.n[b]+tq > k.maxT {
			return nil, fmt.Errorf("model: sequence %d would hold %d tokens, cache holds %d", b, k.n[b]+tq, k.maxT)
		}
		if rows+tq > k.rows {
			return nil, fmt.Errorf("model: forward of more than %d rows", k.rows)
		}
		k.hStart[i] = int32(k.n[b])
		for j, id := range ch.IDs {
			if id < 0 || int(id) >= c.VocabSize {
				return nil, fmt.Errorf("model: token id %d outside vocabulary of %d", id, c.VocabSize)
			}
			k.hIDs[rows+j] = id
			k.hPos[rows+j] = int32(k.n[b] + j)
		}
		rows += tq
		k.hLast[i] = int32(rows - 1)
	}
	C, I, V := c.HiddenSize, c.IntermediateSize, c.VocabSize
	hq, hkv, hd := c.NumHeads, c.NumKVHeads, c.HeadDim
	qd, kvd := hq*hd, hkv*hd
	eps := float32(c.RMSNormEps)
	idv, posv := be.ViewInts(k.ids, 0, rows), be.ViewInts(k.pos, 0, rows)
	stv, lastv := be.ViewInts(k.start, 0, nc), be.ViewInts(k.lastRow, 0, nc)
	be.UploadInts(idv, k.hIDs[:rows])
	be.UploadInts(posv, k.hPos[:rows])
	be.UploadInts(stv, k.hStart[:nc])
	be.UploadInts(lastv, k.hLast[:nc])
	view := func(t compute.Tensor, w int) compute.Tensor { return be.View(t, 0, rows*w) }
	x, ln, rstd, mid := view(k.x, C), view(k.ln, C), view(k.rstd, 1), view(k.mid, C)
	q, kk, vv, ao := view(k.q, qd), view(k.kk, kvd), view(k.vv, kvd), view(k.ao, qd)
	gate, up, h := view(k.gate, I), view(k.up, I), view(k.h, I)

	// Runs of chunks on adjacent slots with equal lengths share one
	// attention call.
	type run struct{ c0, nb, tq, row0 int }
	var runs []run
	row := 0
	for i, ch := range chunks {
		tq := len(ch.IDs)
		if n := len(runs); n > 0 {
			r := &runs[n-1]
			if r.tq == tq && chunks[r.c0].Slot+r.nb == ch.Slot {
				r.nb++
				row += tq
				continue
			}
		}
		runs = append(runs, run{c0: i, nb: 1, tq: tq, row0: row})
		row += tq
	}

	be.Embed(x, m.embed.W, idv, rows, C)
	for l, p := range m.layers {
		be.RMSNorm(ln, rstd, x, p.ln1.W, rows, C, eps)
		k.linear(q, ln, p.q.W, rows, qd, C, false)
		k.linear(kk, ln, p.k.W, rows, kvd, C, false)
		k.linear(vv, ln, p.v.W, rows, kvd, C, false)
		if p.qb != nil {
			be.AddBias(q, p.qb.W, rows, qd)
			be.AddBias(kk, p.kb.W, rows, kvd)
			be.AddBias(vv, p.vb.W, rows, kvd)
		}
		if k.ad != nil {
			k.loraForward(l, QProj, q, ln, rows)
			k.loraForward(l, KProj, kk, ln, rows)
			k.loraForward(l, VProj, vv, ln, rows)
		}
		be.RoPE(q, posv, rows, hq, hd, c.RopeTheta)
		be.RoPE(kk, posv, rows, hkv, hd, c.RopeTheta)
		for _, r := range runs {
			b0, nr := chunks[r.c0].Slot, r.nb*r.tq
			kc := be.View(k.k[l], b0*k.maxT*kvd, r.nb*k.maxT*kvd)
			vc := be.View(k.v[l], b0*k.maxT*kvd, r.nb*k.maxT*kvd)
			st := be.ViewInts(k.start, r.c0, r.nb)
			be.WriteCache(kc, be.View(k.kk, r.row0*kvd, nr*kvd), st, r.nb, r.tq, k.maxT, kvd)
			be.WriteCache(vc, be.View(k.vv, r.row0*kvd, nr*kvd), st, r.nb, r.tq, k.maxT, kvd)
			be.AttentionCached(be.View(k.ao, r.row0*qd, nr*qd), be.View(k.q, r.row0*qd, nr*qd), kc, vc, st, r.nb, r.tq, k.maxT, hq, hkv, hd)
		}
		k.linear(mid, ao, p.o.W, rows, C, qd, false)
		if k.ad != nil {
			k.loraForward(l, OProj, mid, ao, rows)
		}
		be.Accumulate(mid, x)
		be.RMSNorm(ln, rstd, mid, p.ln2.W, rows, C, eps)
		k.linear(gate, ln, p.gate.W, rows, I, C, false)
		k.linear(up, ln, p.up.W, rows, I, C, false)
		if k.ad != nil {
			k.loraForward(l, GateProj, gate, ln, rows)
			k.loraForward(l, UpProj, up, ln, rows)
		}
		be.SwiGLU(h, gate, up, rows*I)
		k.linear(x, h, p.down.W, rows, C, I, false)
		if k.ad != nil {
			k.loraForward(l, DownProj, x, h, rows)
		}
		be.Accumulate(x, mid)
	}
	// Only each chunk's last row needs logits: gather those rows first.
	last, lnl, rstdl, lg := be.View(k.last, 0, nc*C), be.View(k.lnl, 0, nc*C), be.View(k.rstdl, 0, nc), be.View(k.logits, 0, nc*V)
	be.Embed(last, x, lastv, nc, C)
	be.RMSNorm(lnl, rstdl, last, m.norm.W, nc, C, eps)
	k.linear(lg, lnl, m.lmHead.W, nc, V, C, false)
	for _, ch := range chunks {
		k.n[ch.Slot] += len(ch.IDs)
	}
	return lg, nil
}
