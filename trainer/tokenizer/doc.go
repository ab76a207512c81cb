// Package tokenizer encodes text to token ids and back for byte-level BPE
// tokenizers stored in Hugging Face's tokenizer.json format, as used by the
// Qwen2 / Qwen2.5 / Qwen3 model families.
//
// The pipeline is the one tokenizer.json describes: added (special) tokens are
// matched first on the raw text, the text between them is NFC-normalized,
// split into pre-tokens by a hand-written scanner equivalent to Qwen's split
// regex, mapped through GPT-2's byte-to-unicode table and merged by BPE rank.
// BPE results are cached per pre-token, so encoding long texts is dominated by
// the scanner rather than by merging.
//
// It deliberately does not implement the rest of the tokenizer.json universe
// (WordPiece, Unigram, other normalizers or pre-tokenizers, truncation,
// padding, post-processors): Load refuses any file that asks for something it
// does not implement exactly, instead of silently producing different ids.
// Chat formatting lives in package chat.
package tokenizer
