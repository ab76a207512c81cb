package generate

import (
	"context"
	"fmt"
	"testing"

	"github.com/rlhost/rlhost/trainer/compute/cpu"
	"github.com/rlhost/rlhost/trainer/hfconfig"
	"github.com/rlhost/rlhost/trainer/model"
)

// BenchmarkDecode10MWideVocab decodes the 10m preset with a Qwen-sized
// vocabulary at batch 1 and 16 (reports generated tokens per second).
func BenchmarkDecode10MWideVocab(b *testing.B) {
	be, err := cpu.New(cpu.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	cfg, _ := hfconfig.Preset("10m")
	cfg.VocabSize = 151669
	m, err := model.New(be, cfg)
	if err != nil {
		b.Fatal(err)
	}
	m.Init(1, 0.02)
	for _, B := range []int{1, 16} {
		b.Run(fmt.Sprintf("batch%d", B), func(b *testing.B) {
			prompts := make([][]int, B)
			for i := range prompts {
				prompts[i] = []int{1 + i, 2, 3, 4}
			}
			n := 0
			for b.Loop() {
				res, err := Generate(context.Background(), m, prompts, Options{MaxTokens: 16, Temperature: 1, Seed: 1})
				if err != nil {
					b.Fatal(err)
				}
				for _, r := range res {
					n += len(r.Tokens)
				}
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}
