package grpo

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/rlhost/rlhost/trainer/hfconfig"
	"github.com/rlhost/rlhost/trainer/model"
)

// Memory is an estimate, in bytes, of what a Trainer holds.
type Memory struct {
	Params      int64 // policy weights (with LoRA: the base and the adapter)
	Grads       int64 // one gradient per trained weight
	Optimizer   int64 // AdamW first and second moments of the trained weights
	Reference   int64 // frozen reference weights (beta > 0)
	Activations int64 // the MicroBatch×MaxSeqLen run: activations, logits, attention, backward scratch (and the reference's run)
	Total       int64
}

func (m Memory) String() string {
	gib := func(b int64) string { return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30)) }
	return fmt.Sprintf("%s (weights %s, gradients %s, AdamW %s, reference %s, activations %s)",
		gib(m.Total), gib(m.Params), gib(m.Grads), gib(m.Optimizer), gib(m.Reference), gib(m.Activations))
}

// EstimateMemory is what New allocates for a model of shape hf trained
// with c, in float32: weights, gradients, AdamW moments, the reference
// copy when Beta > 0, and every tensor of the MicroBatch×MaxSeqLen run
// (per-layer activations, the B·T·V logits, the B·H·T·T attention
// probabilities per layer, backward scratch). It leaves out the Go
// runtime, the CPU backend's matmul packing scratch (a few MiB) and what
// generation or serving hold.
func EstimateMemory(hf *hfconfig.Config, c Config) Memory {
	const f = 4 // bytes per float32 or int32
	P := int64(hf.NumParams())
	B, T := int64(c.MicroBatch), int64(c.MaxSeqLen)
	N := B * T
	C, I, V, L := int64(hf.HiddenSize), int64(hf.IntermediateSize), int64(hf.VocabSize), int64(hf.NumLayers)
	H := int64(hf.NumHeads)
	qd, kvd := H*int64(hf.HeadDim), int64(hf.NumKVHeads)*int64(hf.HeadDim)

	// model.Run: inputs, the residual stream, final norm, logits, log-probs.
	run := 2*(3*N+B) + B + // ids, positions, targets, lengths (device and host copies)
		(L+1)*N*C + N*C + N + N*V + N + N
	// Per layer: ln1, rstd1, q, k, v, attention probabilities, attention
	// output, mid, ln2, rstd2, gate, up, h.
	run += L * (N*C + N + N*qd + 2*N*kvd + B*H*T*T + N*qd + 2*N*C + N + 3*N*I)
	// Backward scratch of a training run (one set, reused per layer).
	back := 2*N*C + 2*N*qd + 2*N*kvd + 3*N*I + N
	host := 4*N + 2*B // the trainer's id/target/log-prob buffers
	m := Memory{Params: P * f, Grads: P * f, Optimizer: 2 * P * f}
	m.Activations = (run + back + host) * f
	if c.LoRA != nil {
		// Only the adapter trains; its activations are u = x·Aᵀ per
		// adapted projection (and the dropped input with dropout).
		r := int64(c.LoRA.Rank)
		var A, acts int64
		for _, mod := range c.LoRA.Targets {
			in, out := loraDims(hf, mod)
			A += r * (in + out)
			acts += N * r
			if c.LoRA.Dropout > 0 {
				acts += N * in
			}
		}
		m.Params += L * A * f
		m.Grads, m.Optimizer = L*A*f, 2*L*A*f
		m.Activations += (L*acts + N*r + C) * f
		if c.LoRA.Dropout > 0 {
			m.Activations += 2 * N * max(C, I) * f // scratch and host buffer
		}
	}
	if c.Beta != 0 {
		if c.LoRA == nil {
			m.Reference = P * f // with LoRA the base is the reference
		}
		m.Activations += run * f
	}
	m.Total = m.Params + m.Grads + m.Optimizer + m.Reference + m.Activations
	return m
}

func loraDims(hf *hfconfig.Config, mod model.Module) (in, out int64) {
	C, I := int64(hf.HiddenSize), int64(hf.IntermediateSize)
	qd, kvd := int64(hf.NumHeads*hf.HeadDim), int64(hf.NumKVHeads*hf.HeadDim)
	switch mod {
	case model.QProj:
		return C, qd
	case model.KProj, model.VProj:
		return C, kvd
	case model.OProj:
		return qd, C
	case model.GateProj, model.UpProj:
		return C, I
	}
	return I, C
}

// CheckMemory compares EstimateMemory with the memory the system has
// available (MemAvailable in /proc/meminfo) and returns an error stating
// both when the estimate does not fit, with what would (Advice). lora is
// the adapter an empty lora block trains, for that advice; nil leaves
// LoRA out of it. Call it before loading the model: the estimate includes
// the weights. Where /proc/meminfo cannot be read, it only returns the
// estimate.
func CheckMemory(hf *hfconfig.Config, c Config, lora *LoRA) (Memory, error) {
	est := EstimateMemory(hf, c)
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return est, nil
	}
	avail, ok := memAvailable(string(b))
	if ok && est.Total > avail {
		return est, fmt.Errorf("grpo: training needs about %s, but only %s is available. %s", est, gib(avail), Advice(hf, c, avail, lora))
	}
	return est, nil
}

func gib(b int64) string { return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30)) }

// Advice says why training with c does not fit in avail bytes and what
// would: which part of the estimate dominates; when the weights,
// gradients and optimiser state alone are over (the floor no micro_batch
// or max_seq_len goes below), that no batch setting helps; else the
// longest max_seq_len that fits. When c trains every weight and lora is
// given, it adds what a lora block would need, and whether that fits.
func Advice(hf *hfconfig.Config, c Config, avail int64, lora *LoRA) string {
	est := EstimateMemory(hf, c)
	floor := est.Params + est.Grads + est.Optimizer + est.Reference
	var out []string
	parts := []struct {
		name string
		b    int64
	}{{"the weights", est.Params}, {"the gradients", est.Grads}, {"AdamW's moments", est.Optimizer},
		{"the reference copy (beta > 0)", est.Reference}, {"the activations of one micro_batch × max_seq_len pass", est.Activations}}
	top := parts[0]
	for _, p := range parts[1:] {
		if p.b > top.b {
			top = p
		}
	}
	out = append(out, fmt.Sprintf("Most of it is %s (%s).", top.name, gib(top.b)))
	if floor > avail {
		what := "weights, gradients and AdamW alone"
		if est.Reference > 0 {
			what = "weights, gradients, AdamW and the reference copy alone"
		}
		out = append(out, fmt.Sprintf("The %s need %s, so no micro_batch or max_seq_len fits.", what, gib(floor)))
	} else if t := longestFit(hf, c, avail); t > 0 {
		out = append(out, fmt.Sprintf("max_seq_len = %d fits (about %s at micro_batch = %d).", t, gib(EstimateMemory(hf, withSeq(c, t)).Total), c.MicroBatch))
	} else if c.MicroBatch > 1 {
		one := c
		one.MicroBatch = 1
		if t := longestFit(hf, one, avail); t > 0 {
			out = append(out, fmt.Sprintf("micro_batch = 1 with max_seq_len = %d fits (about %s).", t, gib(EstimateMemory(hf, withSeq(one, t)).Total)))
		}
	}
	if est.Reference > 0 && c.LoRA == nil {
		out = append(out, fmt.Sprintf("beta = 0 drops the reference copy (%s).", gib(est.Reference)))
	}
	if c.LoRA == nil && lora != nil {
		lc := c
		lc.LoRA = lora
		le := EstimateMemory(hf, lc)
		block := fmt.Sprintf("A LoRA adapter (a lora {} block in trainer: rank %d on %s; docs/lora.md)", lora.Rank, moduleList(lora.Targets))
		switch lfloor := le.Params + le.Grads + le.Optimizer; {
		case le.Total <= avail:
			out = append(out, fmt.Sprintf("%s needs about %s, which fits.", block, gib(le.Total)))
		case lfloor > avail:
			out = append(out, fmt.Sprintf("%s would still need %s for the frozen weights alone: a smaller model, or more memory.", block, gib(lfloor)))
		default:
			msg := fmt.Sprintf("%s needs about %s at these settings", block, gib(le.Total))
			if t := longestFit(hf, lc, avail); t > 0 {
				msg += fmt.Sprintf("; with max_seq_len = %d, about %s, which fits", t, gib(EstimateMemory(hf, withSeq(lc, t)).Total))
			}
			out = append(out, msg+".")
		}
	}
	return strings.Join(out, " ")
}

// longestFit is the longest max_seq_len, below c's, at which training
// with c fits in avail bytes: a multiple of 128 when that is 128 or more,
// else 0.
func longestFit(hf *hfconfig.Config, c Config, avail int64) int {
	const step = 128
	lo, hi := 0, (c.MaxSeqLen+step-1)/step // in steps: lo fits (or is 0); hi, at or past c's, does not
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if EstimateMemory(hf, withSeq(c, mid*step)).Total <= avail {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo * step
}

func withSeq(c Config, t int) Config {
	c.MaxSeqLen = t
	return c
}

func moduleList(ms []model.Module) string {
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = strings.TrimSuffix(m.String(), "_proj")
	}
	return strings.Join(names, ", ")
}

// memAvailable parses the MemAvailable line of /proc/meminfo, in bytes.
func memAvailable(meminfo string) (int64, bool) {
	for _, line := range strings.Split(meminfo, "\n") {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			f := strings.Fields(rest)
			if len(f) != 2 || f[1] != "kB" {
				return 0, false
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil || kb < 0 {
				return 0, false
			}
			return kb << 10, true
		}
	}
	return 0, false
}
