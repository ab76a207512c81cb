package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// benchCorpus is the committed corpus, every file concatenated.
func benchCorpus(b *testing.B) string {
	b.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "corpus", "*.txt"))
	if err != nil || len(files) == 0 {
		b.Fatalf("no corpus: %v", err)
	}
	var sb strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		sb.Write(data)
	}
	return sb.String()
}

func (t *Tokenizer) resetCache() {
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		clear(sh.m)
		sh.mu.Unlock()
	}
}

// BenchmarkEncode reports tokens/s on the corpus for the real Qwen
// tokenizer with a warm and a cold BPE cache, for the scanner alone, and for
// a baseline that only decodes and classifies every character (the least
// work any tokenizer must do), so that ratios can be quoted from one run.
// scripts/tokenizer/bench.sh adds the JavaScript reference on the same corpus.
func BenchmarkEncode(b *testing.B) {
	tok, _ := loadQwen(b)
	text := benchCorpus(b)
	ntok := len(tok.Encode(text))
	report := func(b *testing.B) {
		b.ReportMetric(float64(ntok)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
	}
	b.Run("warm", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		dst := make([]int, 0, ntok)
		tok.AppendEncode(dst, text)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			dst = tok.AppendEncode(dst[:0], text)
		}
		report(b)
	})
	b.Run("cold", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			tok.resetCache()
			b.StartTimer()
			tok.Encode(text)
		}
		report(b)
	})
	b.Run("split-only", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		for i := 0; i < b.N; i++ {
			for j := 0; j < len(text); {
				j = splitNext(text, j)
			}
		}
		report(b)
	})
	b.Run("baseline-runescan", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		var sink int
		for i := 0; i < b.N; i++ {
			for j := 0; j < len(text); {
				c, w := classAt(text, j)
				sink += int(c)
				j += w
			}
		}
		_ = sink
		report(b)
	})
}
