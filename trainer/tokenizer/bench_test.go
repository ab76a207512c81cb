package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// benchCorpus is the committed corpus cut into documents of 16 lines (a few
// hundred tokens, like a prompt or a turn), exactly as bench.mjs cuts it.
func benchCorpus(b *testing.B) (docs []string, bytes int) {
	b.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "corpus", "*.txt"))
	if err != nil || len(files) == 0 {
		b.Fatalf("no corpus: %v", err)
	}
	for _, f := range files { // Glob sorts, as bench.mjs does
		data, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		lines := strings.SplitAfter(string(data), "\n")
		if lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
		for i := 0; i < len(lines); i += 16 {
			doc := strings.Join(lines[i:min(i+16, len(lines))], "")
			docs = append(docs, doc)
			bytes += len(doc)
		}
	}
	return docs, bytes
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
	docs, size := benchCorpus(b)
	ntok := 0
	for _, d := range docs {
		ntok += len(tok.Encode(d))
	}
	report := func(b *testing.B) {
		b.ReportMetric(float64(ntok)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
	}
	b.Run("warm", func(b *testing.B) {
		b.SetBytes(int64(size))
		dst := make([]int, 0, ntok)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			for _, d := range docs {
				dst = tok.AppendEncode(dst[:0], d)
			}
		}
		report(b)
	})
	b.Run("cold", func(b *testing.B) {
		b.SetBytes(int64(size))
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			tok.resetCache()
			b.StartTimer()
			for _, d := range docs {
				tok.Encode(d)
			}
		}
		report(b)
	})
	b.Run("split-only", func(b *testing.B) {
		b.SetBytes(int64(size))
		for i := 0; i < b.N; i++ {
			for _, d := range docs {
				for j := 0; j < len(d); {
					j = splitNext(d, j)
				}
			}
		}
		report(b)
	})
	b.Run("baseline-runescan", func(b *testing.B) {
		b.SetBytes(int64(size))
		var sink int
		for i := 0; i < b.N; i++ {
			for _, d := range docs {
				for j := 0; j < len(d); {
					c, w := classAt(d, j)
					sink += int(c)
					j += w
				}
			}
		}
		_ = sink
		report(b)
	})
}
