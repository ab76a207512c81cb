package tokenizer

import (
	"strings"
	"sync"

	"golang.org/x/text/unicode/norm"
)

// Tokenizer is an immutable byte-level BPE tokenizer plus a BPE result cache.
// It is safe for concurrent use.
type Tokenizer struct {
	vocab        map[string]int   // byte-level token string -> id
	added        map[string]int   // added token content -> id
	addedByFirst [256][]string    // added contents by first byte, longest first
	merges       map[uint64]merge // (left id, right id) -> rule
	byteID       [256]int32       // id of each single byte
	idBytes      [][]byte         // id -> raw bytes it decodes to
	idToken      []string         // id -> vocabulary string (as in tokenizer.json)
	eos, pad     int              // -1 when unknown
	maxWord      int              // pre-tokens longer than this are not cached
	shards       [cacheShards]cacheShard
	scratch      sync.Pool // *bpeScratch
}

// cacheShards splits the pre-token cache so that concurrent encoders rarely
// contend on one lock.
const (
	cacheShards       = 64
	cacheShardEntries = 1 << 12 // 262,144 words in all (tens of MB) before shards reset
)

type cacheShard struct {
	mu sync.RWMutex
	m  map[string][]int32
}

func (t *Tokenizer) initCache() {
	for i := range t.shards {
		t.shards[i].m = make(map[string][]int32)
	}
	t.scratch.New = func() any { return new(bpeScratch) }
}

// shardOf hashes a word with FNV-1a; cheap and good enough for spreading.
func shardOf(w string) int {
	h := uint32(2166136261)
	for i := 0; i < len(w); i++ {
		h ^= uint32(w[i])
		h *= 16777619
	}
	return int(h % cacheShards)
}

// appendWord appends the ids of one pre-token, via the cache.
func (t *Tokenizer) appendWord(out []int, w string) []int {
	if len(w) == 1 {
		return append(out, int(t.byteID[w[0]]))
	}
	cacheable := len(w) <= t.maxWord
	var sh *cacheShard
	if cacheable {
		sh = &t.shards[shardOf(w)]
		sh.mu.RLock()
		ids, ok := sh.m[w]
		sh.mu.RUnlock()
		if ok {
			for _, id := range ids {
				out = append(out, int(id))
			}
			return out
		}
	}
	s := t.scratch.Get().(*bpeScratch)
	start := len(out)
	out = t.bpe(w, s, out)
	t.scratch.Put(s)
	if cacheable {
		ids := make([]int32, len(out)-start)
		for i, id := range out[start:] {
			ids[i] = int32(id)
		}
		key := strings.Clone(w) // w may point into a large caller string
		sh.mu.Lock()
		if len(sh.m) >= cacheShardEntries {
			clear(sh.m) // bounded memory; rebuilding is cheap
		}
		sh.m[key] = ids
		sh.mu.Unlock()
	}
	return out
}

// Encode returns the token ids of text. Added and special tokens (such as
// <|im_start|>) that occur in text are matched as single tokens.
func (t *Tokenizer) Encode(text string) []int {
	return t.AppendEncode(make([]int, 0, len(text)/3+1), text)
}

// AppendEncode appends the ids of text to dst and returns it; it allocates
// nothing when dst has room and every pre-token is cached.
func (t *Tokenizer) AppendEncode(dst []int, text string) []int {
	start := 0
	for i := 0; i < len(text); i++ {
		cands := t.addedByFirst[text[i]]
		if cands == nil {
			continue
		}
		for _, c := range cands {
			if strings.HasPrefix(text[i:], c) {
				dst = t.appendSegment(dst, text[start:i])
				dst = append(dst, t.added[c])
				start = i + len(c)
				i = start - 1
				break
			}
		}
	}
	return t.appendSegment(dst, text[start:])
}

// appendSegment encodes text that contains no added token.
func (t *Tokenizer) appendSegment(dst []int, s string) []int {
	if s == "" {
		return dst
	}
	// QuickSpanString is the allocation-free check; only text that may not
	// be NFC pays for normalizing.
	if norm.NFC.QuickSpanString(s) != len(s) {
		s = norm.NFC.String(s)
	}
	for i := 0; i < len(s); {
		j := splitNext(s, i)
		dst = t.appendWord(dst, s[i:j])
		i = j
	}
	return dst
}

// Decode returns the text of ids: added tokens as their content, other tokens
// as their bytes. Unknown ids are skipped. The result is the raw byte string,
// not repaired to valid UTF-8, so decoding a prefix and the rest separately
// and concatenating gives the same bytes as decoding everything at once.
// (Hugging Face replaces invalid UTF-8 with U+FFFD; for any ids that came from
// Encode the two agree.)
func (t *Tokenizer) Decode(ids []int) string {
	n := 0
	for _, id := range ids {
		if id >= 0 && id < len(t.idBytes) {
			n += len(t.idBytes[id])
		}
	}
	var b strings.Builder
	b.Grow(n)
	for _, id := range ids {
		if id >= 0 && id < len(t.idBytes) {
			b.Write(t.idBytes[id])
		}
	}
	return b.String()
}

// TokenID returns the id of an added token (by its content, e.g.
// "<|im_end|>") or of a vocabulary entry in its byte-level spelling as written
// in tokenizer.json (e.g. "Ġhello" for " hello").
func (t *Tokenizer) TokenID(token string) (int, bool) {
	if id, ok := t.added[token]; ok {
		return id, true
	}
	id, ok := t.vocab[token]
	return id, ok
}

// IDToken returns the tokenizer.json spelling of id: the content of an added
// token, or the byte-level vocabulary string.
func (t *Tokenizer) IDToken(id int) (string, bool) {
	if id < 0 || id >= len(t.idToken) || t.idBytes[id] == nil {
		return "", false
	}
	return t.idToken[id], true
}

// IsAdded reports whether id is an added (special) token.
func (t *Tokenizer) IsAdded(id int) bool {
	if id < 0 || id >= len(t.idToken) {
		return false
	}
	got, ok := t.added[t.idToken[id]]
	return ok && got == id
}

// VocabSize is one more than the largest id, added tokens included.
func (t *Tokenizer) VocabSize() int { return len(t.idBytes) }

// EOS is the id of tokenizer_config.json's eos_token when loaded with LoadDir,
// else of <|endoftext|>, else -1.
func (t *Tokenizer) EOS() int { return t.eos }

// Pad is the id of tokenizer_config.json's pad_token when loaded with LoadDir,
// else of <|endoftext|>, else -1.
func (t *Tokenizer) Pad() int { return t.pad }
