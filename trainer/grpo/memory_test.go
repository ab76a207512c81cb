package grpo

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/rlhost/rlhost/trainer/hfconfig"
	"github.com/rlhost/rlhost/trainer/model"
)

// TestEstimateMemoryHandComputed pins the estimate for the 0.5B preset at
// B=1, T=256 to numbers worked out by hand from the tensor shapes.
func TestEstimateMemoryHandComputed(t *testing.T) {
	hf, err := hfconfig.Preset("qwen2.5-0.5b")
	if err != nil {
		t.Fatal(err)
	}
	c := DefaultConfig()
	c.MicroBatch, c.MaxSeqLen = 1, 256
	got := EstimateMemory(hf, c)
	const P = 494032768 // Qwen2.5-0.5B's parameter count (tied embeddings)
	if got.Params != 4*P || got.Grads != 4*P || got.Optimizer != 8*P || got.Reference != 0 {
		t.Fatalf("weights %d grads %d adam %d ref %d, want %d %d %d 0", got.Params, got.Grads, got.Optimizer, got.Reference, 4*P, 4*P, 8*P)
	}
	// Per layer: 3 hidden-wide (896), q and attention output (896 each),
	// k and v (128 each), 3 MLP-wide (4864), 2 row scalars, and the 14
	// heads' 256×256 attention probabilities.
	N := int64(256)
	perLayer := N*(3*896+2*896+2*128+3*4864+2) + 14*256*256
	run := 2*(3*N+1) + 1 + 25*N*896 + N*896 + N + N*151936 + 2*N + 24*perLayer
	back := N*(2*896+2*896+2*128+3*4864+1) + 4*N + 2
	if want := 4 * (run + back); got.Activations != want {
		t.Fatalf("activations %d, want %d", got.Activations, want)
	}
	// Logits alone are 155.6 MB; the total lands near 8.7 GB (8.07 GiB).
	if got.Total < 8.6e9 || got.Total > 8.8e9 {
		t.Fatalf("total %s out of the expected 8.6-8.8 GB", got)
	}
	c.Beta = 0.04
	withRef := EstimateMemory(hf, c)
	if withRef.Reference != 4*P || withRef.Activations != got.Activations+4*run {
		t.Fatalf("beta > 0: reference %d activations %d", withRef.Reference, withRef.Activations)
	}
}

// TestEstimateMemoryMatchesAllocation compares the estimate with the Go
// heap a trainer actually holds after a step (the CPU backend allocates
// tensors on the Go heap). The band allows for the backend's scratch.
func TestEstimateMemoryMatchesAllocation(t *testing.T) {
	hf, err := hfconfig.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	hf.HiddenSize, hf.IntermediateSize, hf.HeadDim, hf.VocabSize = 64, 160, 16, 512
	hf.EOSTokenIDs = []int{511}
	for _, tc := range []struct {
		beta float64
		lora *LoRA
	}{
		{0, nil}, {0.1, nil},
		{0, &LoRA{AdapterConfig: model.AdapterConfig{Rank: 8, Alpha: 16, Targets: []model.Module{model.QProj, model.VProj}}}},
		{0.1, &LoRA{AdapterConfig: model.AdapterConfig{Rank: 8, Alpha: 16, Dropout: 0.1, Targets: model.Modules()}}},
	} {
		beta := tc.beta
		c := DefaultConfig()
		c.MicroBatch, c.MaxSeqLen, c.Beta, c.LoRA = 4, 64, beta, tc.lora
		be := backend32(t)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		m, err := model.New(be, hf)
		if err != nil {
			t.Fatal(err)
		}
		m.Init(1, 0.02)
		tr, err := New(m, c)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tr.Step(context.Background(), randomGroups(rand.New(rand.NewPCG(1, 1)), 512, 2, 4, 60)); err != nil {
			t.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		measured := int64(after.HeapAlloc) - int64(before.HeapAlloc)
		est := EstimateMemory(hf, c)
		ratio := float64(measured) / float64(est.Total)
		t.Logf("beta %g lora %v: estimate %d bytes, heap held %d bytes, ratio %.3f", beta, tc.lora != nil, est.Total, measured, ratio)
		// The backend's packing scratch (~1 MiB here) is left out of the
		// estimate: allow it on top of 20%.
		if ratio < 0.97 || measured > est.Total+max(est.Total/5, 3<<19) {
			t.Errorf("beta %g lora %v: heap held %d bytes, estimate %d (ratio %.3f: below 0.97, or above by more than max(20%%, 1.5 MiB))", beta, tc.lora != nil, measured, est.Total, ratio)
		}
		runtime.KeepAlive(tr)
	}
}

func TestMemAvailable(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   21000000 kB\n", 21000000 << 10, true},
		{"MemTotal: 5 kB\n", 0, false},
		{"MemAvailable: lots kB\n", 0, false},
		{"MemAvailable: 5 MB\n", 0, false},
	} {
		got, ok := memAvailable(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%q: %d %v, want %d %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestCheckMemory(t *testing.T) {
	hf, err := hfconfig.Preset("qwen2.5-0.5b")
	if err != nil {
		t.Fatal(err)
	}
	c := DefaultConfig()
	c.MicroBatch, c.MaxSeqLen = 1, 256
	if _, err := CheckMemory(hf, c, nil); err != nil {
		t.Logf("this machine cannot hold the 0.5B trainer: %v", err)
	}
	// 4096 sequences of 32768 tokens: petabytes of attention.
	c.MicroBatch, c.MaxSeqLen = 4096, 32768
	est, err := CheckMemory(hf, c, nil)
	if _, statErr := os.Stat("/proc/meminfo"); statErr != nil {
		t.Skip("no /proc/meminfo on this system")
	}
	if err == nil || !strings.Contains(err.Error(), "GiB") || !strings.Contains(err.Error(), "available") {
		t.Fatalf("estimate %s: got %v, want an error stating estimate and availability", est, err)
	}
	t.Log(err)
}

// The advice names what dominates, the floor no batch setting goes below,
// the longest max_seq_len that fits, and LoRA with its estimate.
func TestAdvice(t *testing.T) {
	hf, err := hfconfig.Preset("qwen2.5-0.5b")
	if err != nil {
		t.Fatal(err)
	}
	lora := &LoRA{AdapterConfig: model.AdapterConfig{Rank: 8, Alpha: 8, Targets: []model.Module{model.QProj, model.VProj}}}
	c := DefaultConfig()
	c.MicroBatch, c.MaxSeqLen = 1, 4096
	est := EstimateMemory(hf, c)
	floor := est.Params + est.Grads + est.Optimizer
	const GiB = 1 << 30
	fits := fmt.Sprintf("max_seq_len = %d fits (about ", longestFit(hf, c, 12*GiB))
	withLoRA := c
	withLoRA.LoRA = lora
	le := EstimateMemory(hf, withLoRA)
	loraFloor := le.Params + le.Grads + le.Optimizer
	for _, tc := range []struct {
		name  string
		c     Config
		avail int64
		lora  *LoRA
		want  []string
		not   []string
	}{
		{"activations dominate: a shorter max_seq_len fits", c, 12 * GiB, lora, []string{
			"Most of it is the activations of one micro_batch × max_seq_len pass",
			fits,
			"A LoRA adapter (a lora {} block in trainer: rank 8 on q, v; docs/lora.md) needs about ",
		}, []string{"no micro_batch"}},
		{"below the floor: only LoRA helps", c, floor - GiB, lora, []string{
			"The weights, gradients and AdamW alone need " + gib(floor) + ", so no micro_batch or max_seq_len fits.",
			"A LoRA adapter", "with max_seq_len = ",
		}, []string{"max_seq_len = 4096"}},
		{"not even LoRA's frozen weights", c, est.Params / 2, lora, []string{"would still need " + gib(loraFloor) + " for the frozen weights alone"}, nil},
		{"already LoRA: no LoRA advice", withLoRA, 2 * GiB, lora, nil, []string{"A LoRA adapter"}},
		{"no LoRA offered", c, 12 * GiB, nil, []string{fits}, []string{"LoRA"}},
		{"reference copy", func() Config { b := c; b.Beta = 0.04; return b }(), floor, nil, []string{"weights, gradients, AdamW and the reference copy alone", "beta = 0 drops the reference copy"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Advice(hf, tc.c, tc.avail, tc.lora)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("advice lacks %q:\n%s", w, got)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(got, n) {
					t.Errorf("advice has %q:\n%s", n, got)
				}
			}
		})
	}
	// What it proposes fits.
	if t2 := longestFit(hf, c, 12*GiB); t2 == 0 || EstimateMemory(hf, withSeq(c, t2)).Total > 12*GiB || EstimateMemory(hf, withSeq(c, t2+128)).Total <= 12*GiB {
		t.Errorf("longestFit = %d is not the longest multiple of 128 that fits", t2)
	}
}
