package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// fileJSON is the subset of tokenizer.json this package reads. Fields that
// change behaviour are decoded so that unsupported values can be refused.
type fileJSON struct {
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	Decoder       json.RawMessage  `json:"decoder"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Model         modelJSON        `json:"model"`
}

type addedTokenJSON struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type modelJSON struct {
	Type                    string          `json:"type"`
	Dropout                 *float64        `json:"dropout"`
	UnkToken                *string         `json:"unk_token"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	ByteFallback            bool            `json:"byte_fallback"`
	IgnoreMerges            bool            `json:"ignore_merges"`
	Vocab                   map[string]int  `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
}

type componentJSON struct {
	Type           string            `json:"type"`
	Pretokenizers  []json.RawMessage `json:"pretokenizers"`
	Normalizers    []json.RawMessage `json:"normalizers"`
	Pattern        *patternJSON      `json:"pattern"`
	Behavior       string            `json:"behavior"`
	Invert         bool              `json:"invert"`
	AddPrefixSpace bool              `json:"add_prefix_space"`
	UseRegex       *bool             `json:"use_regex"`
}

type patternJSON struct {
	Regex  *string `json:"Regex"`
	String *string `json:"String"`
}

// configJSON is the subset of tokenizer_config.json used: which tokens end a
// sequence and pad it. Each may be a string or an AddedToken object.
type configJSON struct {
	EOSToken json.RawMessage `json:"eos_token"`
	PadToken json.RawMessage `json:"pad_token"`
}

// maxVocab bounds ids so that a hostile file cannot make Load allocate
// gigabytes for an id table.
const maxVocab = 1 << 24

// Load reads a tokenizer.json file. EOS and padding default to
// <|endoftext|> when present; use LoadDir to honour tokenizer_config.json.
func Load(path string) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: read %s: %w", path, err)
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	return t, nil
}

// LoadDir reads dir/tokenizer.json and, when present,
// dir/tokenizer_config.json for the eos_token and pad_token.
func LoadDir(dir string) (*Tokenizer, error) {
	t, err := Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	data, err := os.ReadFile(cfgPath)
	if errors.Is(err, os.ErrNotExist) {
		return t, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tokenizer: read %s: %w", cfgPath, err)
	}
	if err := t.applyConfig(data); err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", cfgPath, err)
	}
	return t, nil
}

func (t *Tokenizer) applyConfig(data []byte) error {
	var cfg configJSON
	if err := json.Unmarshal(data, &cfg); err != nil {
		return fmt.Errorf("parse: %w", err)
	}
	set := func(field string, raw json.RawMessage, dst *int) error {
		name, err := tokenName(raw)
		if err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		if name == "" {
			return nil
		}
		id, ok := t.TokenID(name)
		if !ok {
			return fmt.Errorf("%s %q is not in the vocabulary", field, name)
		}
		*dst = id
		return nil
	}
	if err := set("eos_token", cfg.EOSToken, &t.eos); err != nil {
		return err
	}
	if err := set("pad_token", cfg.PadToken, &t.pad); err != nil {
		return err
	}
	return nil
}

// tokenName accepts null, "tok" or {"content": "tok", ...}.
func tokenName(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", fmt.Errorf("want a string or an object with content: %w", err)
	}
	return obj.Content, nil
}

// Parse builds a Tokenizer from the contents of a tokenizer.json file.
func Parse(data []byte) (*Tokenizer, error) {
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("parse tokenizer.json: %w", err)
	}
	if err := checkModel(&f.Model); err != nil {
		return nil, err
	}
	if err := checkNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if err := checkPreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if err := checkByteLevel("decoder", f.Decoder, true); err != nil {
		return nil, err
	}
	if err := checkByteLevel("post_processor", f.PostProcessor, true); err != nil {
		return nil, err
	}
	return build(&f)
}

func checkModel(m *modelJSON) error {
	switch {
	case m.Type != "BPE":
		return fmt.Errorf("model.type %q: only BPE is supported", m.Type)
	case m.Dropout != nil && *m.Dropout != 0:
		return errors.New("model.dropout: BPE dropout is not supported")
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "":
		return errors.New("model.continuing_subword_prefix is not supported")
	case m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return errors.New("model.end_of_word_suffix is not supported")
	case m.ByteFallback:
		return errors.New("model.byte_fallback is not supported (byte-level BPE needs none)")
	case m.IgnoreMerges:
		return errors.New("model.ignore_merges is not supported")
	case len(m.Vocab) == 0:
		return errors.New("model.vocab is empty")
	}
	return nil
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

func checkNormalizer(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var c componentJSON
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("normalizer: %w", err)
	}
	if c.Type == "Sequence" && len(c.Normalizers) == 1 {
		return checkNormalizer(c.Normalizers[0])
	}
	if c.Type != "NFC" {
		return fmt.Errorf("normalizer %q: only NFC (or none) is supported", c.Type)
	}
	return nil
}

// checkPreTokenizer accepts exactly Sequence[Split(QwenSplitPattern,
// Isolated), ByteLevel(add_prefix_space=false, use_regex=false)].
func checkPreTokenizer(raw json.RawMessage) error {
	var seq componentJSON
	if isNull(raw) {
		return errors.New("pre_tokenizer is missing: want Sequence[Split, ByteLevel]")
	}
	if err := json.Unmarshal(raw, &seq); err != nil {
		return fmt.Errorf("pre_tokenizer: %w", err)
	}
	if seq.Type != "Sequence" || len(seq.Pretokenizers) != 2 {
		return fmt.Errorf("pre_tokenizer %q: want Sequence[Split, ByteLevel]", seq.Type)
	}
	var split componentJSON
	if err := json.Unmarshal(seq.Pretokenizers[0], &split); err != nil {
		return fmt.Errorf("pre_tokenizer[0]: %w", err)
	}
	if split.Type != "Split" || split.Pattern == nil || split.Pattern.Regex == nil {
		return fmt.Errorf("pre_tokenizer[0] %q: want Split with a Regex pattern", split.Type)
	}
	if *split.Pattern.Regex != QwenSplitPattern {
		return fmt.Errorf("pre_tokenizer[0]: split pattern %q is not supported: "+
			"the hand-written scanner implements exactly %q", *split.Pattern.Regex, QwenSplitPattern)
	}
	if split.Behavior != "Isolated" || split.Invert {
		return fmt.Errorf("pre_tokenizer[0]: split behavior %q invert=%v: want Isolated, invert=false", split.Behavior, split.Invert)
	}
	return checkByteLevel("pre_tokenizer[1]", seq.Pretokenizers[1], false)
}

func checkByteLevel(where string, raw json.RawMessage, nullOK bool) error {
	if isNull(raw) {
		if nullOK {
			return nil
		}
		return fmt.Errorf("%s is missing: want ByteLevel", where)
	}
	var c componentJSON
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	switch {
	case c.Type != "ByteLevel":
		return fmt.Errorf("%s %q: want ByteLevel", where, c.Type)
	case c.AddPrefixSpace:
		return fmt.Errorf("%s: add_prefix_space=true is not supported", where)
	case c.UseRegex != nil && *c.UseRegex && where == "pre_tokenizer[1]":
		return fmt.Errorf("%s: use_regex=true is not supported (the Split step does the splitting)", where)
	}
	return nil
}

// parseMerges accepts both encodings tokenizers has used: ["left right", ...]
// and [["left", "right"], ...]. Decoding the whole list at once is much
// faster than one json.Unmarshal per rule.
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var pairs [][]string
	if err := json.Unmarshal(raw, &pairs); err == nil {
		out := make([][2]string, len(pairs))
		for i, p := range pairs {
			if len(p) != 2 {
				return nil, fmt.Errorf("model.merges[%d]: want 2 parts, got %d", i, len(p))
			}
			out[i] = [2]string{p[0], p[1]}
		}
		return out, nil
	}
	var flat []string
	if err := json.Unmarshal(raw, &flat); err != nil {
		return nil, fmt.Errorf("model.merges: want a list of \"left right\" strings or of pairs: %w", err)
	}
	out := make([][2]string, len(flat))
	for i, s := range flat {
		left, right, ok := strings.Cut(s, " ")
		if !ok || strings.Contains(right, " ") {
			return nil, fmt.Errorf("model.merges[%d] %q: want two parts separated by one space", i, s)
		}
		out[i] = [2]string{left, right}
	}
	return out, nil
}

func build(f *fileJSON) (*Tokenizer, error) {
	t := &Tokenizer{
		vocab:   f.Model.Vocab, // owned from here on; decoded for us alone
		added:   make(map[string]int, len(f.AddedTokens)),
		eos:     -1,
		pad:     -1,
		maxWord: 256,
	}
	size := 0
	for tok, id := range f.Model.Vocab {
		if id < 0 || id >= maxVocab {
			return nil, fmt.Errorf("model.vocab[%q] = %d: id out of range [0, %d)", tok, id, maxVocab)
		}
		size = max(size, id+1)
	}
	for i, a := range f.AddedTokens {
		switch {
		case a.ID < 0 || a.ID >= maxVocab:
			return nil, fmt.Errorf("added_tokens[%d]: id %d out of range", i, a.ID)
		case a.Content == "":
			return nil, fmt.Errorf("added_tokens[%d]: empty content", i)
		case a.SingleWord || a.LStrip || a.RStrip:
			return nil, fmt.Errorf("added_tokens[%d] %q: single_word/lstrip/rstrip are not supported", i, a.Content)
		case a.Normalized:
			return nil, fmt.Errorf("added_tokens[%d] %q: normalized added tokens are not supported", i, a.Content)
		}
		if prev, dup := t.added[a.Content]; dup && prev != a.ID {
			return nil, fmt.Errorf("added_tokens[%d] %q: id %d conflicts with id %d", i, a.Content, a.ID, prev)
		}
		t.added[a.Content] = a.ID
		size = max(size, a.ID+1)
	}

	// Ids must be dense (as in every real tokenizer), so that a hostile file
	// cannot make the id tables below huge.
	if slack := 1 << 16; size > len(t.vocab)+len(t.added)+slack {
		return nil, fmt.Errorf("ids reach %d for %d tokens: the id space is too sparse", size, len(t.vocab)+len(t.added))
	}
	// id -> bytes, for Decode and IDToken.
	t.idBytes = make([][]byte, size)
	t.idToken = make([]string, size)
	table := byteLevelRunes()
	var inverse byteLevelInverse
	for i := range inverse {
		inverse[i] = -1
	}
	for b, r := range table {
		inverse[r] = int16(b)
	}
	for tok, id := range t.vocab {
		raw, ok := byteLevelDecode(tok, &inverse)
		if !ok {
			return nil, fmt.Errorf("model.vocab[%q]: not a byte-level string", tok)
		}
		if t.idToken[id] != "" {
			return nil, fmt.Errorf("model.vocab: id %d used by both %q and %q", id, t.idToken[id], tok)
		}
		t.idBytes[id] = raw
		t.idToken[id] = tok
	}
	for content, id := range t.added {
		t.idBytes[id] = []byte(content)
		t.idToken[id] = content
	}
	for b := 0; b < 256; b++ {
		id, ok := t.vocab[string(table[b])]
		if !ok {
			return nil, fmt.Errorf("model.vocab lacks the byte-level token for byte 0x%02x (%q)", b, string(table[b]))
		}
		t.byteID[b] = int32(id)
	}
	merges, err := parseMerges(f.Model.Merges)
	if err != nil {
		return nil, err
	}
	t.merges = make(map[uint64]merge, len(merges))
	var pair []byte // reused: looking up string(pair) does not allocate
	for rank, m := range merges {
		left, right := m[0], m[1]
		l, okL := t.vocab[left]
		r, okR := t.vocab[right]
		pair = append(append(pair[:0], left...), right...)
		id, okM := t.vocab[string(pair)]
		if !okL || !okR || !okM {
			return nil, fmt.Errorf("model.merges[%d] %q %q: part or result not in vocab", rank, left, right)
		}
		key := pairKey(int32(l), int32(r))
		if _, dup := t.merges[key]; !dup { // the first (lowest-rank) rule wins
			t.merges[key] = merge{rank: int32(rank), id: int32(id)}
		}
	}

	// Added tokens are matched longest first among those starting with the
	// same byte, which gives leftmost-longest matching while scanning.
	for content := range t.added {
		b := content[0]
		t.addedByFirst[b] = append(t.addedByFirst[b], content)
	}
	for b := range t.addedByFirst {
		list := t.addedByFirst[b]
		sort.Slice(list, func(i, j int) bool {
			if len(list[i]) != len(list[j]) {
				return len(list[i]) > len(list[j])
			}
			return list[i] < list[j]
		})
	}
	if id, ok := t.added["<|endoftext|>"]; ok {
		t.eos, t.pad = id, id
	}
	t.initCache()
	return t, nil
}
