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
// both when the estimate does not fit. Call it before loading the model:
// the estimate includes the weights. Where /proc/meminfo cannot be read,
// it only returns the estimate.
func CheckMemory(hf *hfconfig.Config, c Config) (Memory, error) {
	est := EstimateMemory(hf, c)
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return est, nil
	}
	avail, ok := memAvailable(string(b))
	if ok && est.Total > avail {
		hint := "lower micro_batch or max_seq_len"
		if c.Beta != 0 {
			hint += ", or set beta to 0 (no reference model)"
		}
		return est, fmt.Errorf("grpo: training needs about %s, but only %.2f GiB is available; %s", est, float64(avail)/(1<<30), hint)
	}
	return est, nil
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
