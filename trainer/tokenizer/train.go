package tokenizer

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// ChatMLSpecials are the added tokens a Qwen2.5-style chat template needs.
var ChatMLSpecials = []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}

// Train learns a byte-level BPE tokenizer from corpus, in Qwen's layout
// (the same pre-tokenizer split, byte-level alphabet and decoder), and
// returns it as tokenizer.json bytes that this package, transformers and
// vLLM all load. The vocabulary holds the 256 byte tokens, then up to
// vocabSize-256-len(specials) merges, then specials as added tokens (the
// first is the end-of-text token). It is meant for small models made from
// scratch (examples and tests), where a 151k vocabulary would dominate the
// compute; it is deterministic: ties go to the lexically smallest pair.
func Train(corpus []string, vocabSize int, specials []string) ([]byte, error) {
	nMerges := vocabSize - 256 - len(specials)
	if nMerges < 0 {
		return nil, fmt.Errorf("tokenizer: vocab size %d cannot hold 256 bytes and %d specials", vocabSize, len(specials))
	}
	runes := byteLevelRunes()
	// Words are pre-tokens in byte-level spelling, counted.
	counts := map[string]int{}
	for _, doc := range corpus {
		for _, w := range Split(doc) {
			counts[byteLevelEncode([]byte(w), &runes)]++
		}
	}
	type word struct {
		parts []string
		n     int
	}
	var words []word
	for _, w := range slices.Sorted(maps.Keys(counts)) {
		var parts []string
		for _, r := range w {
			parts = append(parts, string(r))
		}
		words = append(words, word{parts, counts[w]})
	}
	vocab := map[string]int{}
	for _, r := range runes {
		vocab[string(r)] = len(vocab)
	}
	var merges [][2]string
	for len(merges) < nMerges {
		pairs := map[[2]string]int{}
		for _, w := range words {
			for i := 0; i+1 < len(w.parts); i++ {
				pairs[[2]string{w.parts[i], w.parts[i+1]}] += w.n
			}
		}
		var best [2]string
		bestN := 1 // a pair seen once is not worth a token
		for p, n := range pairs {
			if n > bestN || (n == bestN && bestN > 1 && (p[0]+" "+p[1]) < (best[0]+" "+best[1])) {
				best, bestN = p, n
			}
		}
		if bestN <= 1 {
			break
		}
		merged := best[0] + best[1]
		if _, ok := vocab[merged]; ok {
			// The same string reached by another pair order: keep the rule
			// (BPE needs it to build the token) but not a second id.
			merges = append(merges, best)
		} else {
			vocab[merged] = len(vocab)
			merges = append(merges, best)
		}
		for wi := range words {
			w := &words[wi]
			for i := 0; i+1 < len(w.parts); i++ {
				if w.parts[i] == best[0] && w.parts[i+1] == best[1] {
					w.parts[i] = merged
					w.parts = slices.Delete(w.parts, i+1, i+2)
				}
			}
		}
	}
	type added struct {
		ID         int    `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		LStrip     bool   `json:"lstrip"`
		RStrip     bool   `json:"rstrip"`
		Normalized bool   `json:"normalized"`
		Special    bool   `json:"special"`
	}
	var addedTokens []added
	for _, s := range specials {
		// model.vocab spells every token byte-level, as the loader (and
		// Hugging Face's) reads it; a special with spaces or newlines
		// differs from its content there.
		key := byteLevelEncode([]byte(s), &runes)
		if _, ok := vocab[key]; ok {
			return nil, fmt.Errorf("tokenizer: special %q collides with a learned token", s)
		}
		id := len(vocab)
		vocab[key] = id
		addedTokens = append(addedTokens, added{ID: id, Content: s, Special: true})
	}
	mergeStrs := make([]string, len(merges))
	for i, m := range merges {
		mergeStrs[i] = m[0] + " " + m[1]
	}
	pattern := QwenSplitPattern
	f := map[string]any{
		"version":    "1.0",
		"truncation": nil, "padding": nil,
		"added_tokens": addedTokens,
		"normalizer":   map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": pattern}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		}},
		"post_processor": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		"decoder":        map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": "",
			"end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
			"vocab": vocab, "merges": mergeStrs},
	}
	return json.MarshalIndent(f, "", " ")
}

// TrainedConfigJSON is the tokenizer_config.json to put beside a trained
// tokenizer: its end-of-text token ends and pads sequences.
func TrainedConfigJSON(specials []string) []byte {
	eos := "<|endoftext|>"
	if slices.Contains(specials, "<|im_end|>") {
		eos = "<|im_end|>"
	}
	b, _ := json.MarshalIndent(map[string]any{
		"eos_token": eos, "pad_token": strings.TrimSpace(specials[0]), "model_max_length": 32768,
		"tokenizer_class": "Qwen2Tokenizer",
	}, "", " ")
	return b
}
