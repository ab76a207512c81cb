package tokenizer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/text/unicode/norm"

	"github.com/rlhost/rlhost/trainer/tokenizer/tokenizertest"
)

// tinySpec describes a small synthetic tokenizer: the 256 byte tokens get
// ids 0..255 in byte order, each merge (written in raw bytes) gets the next
// id, then the added tokens.
type tinySpec struct {
	merges [][2]string
	added  []string
	// edit, when set, changes the decoded JSON before it is re-encoded, to
	// produce files Load must refuse.
	edit func(map[string]any)
}

func (s tinySpec) json(t testing.TB) []byte {
	t.Helper()
	table := byteLevelRunes()
	bl := func(raw string) string { return byteLevelEncode([]byte(raw), &table) }
	vocab := map[string]int{}
	for b := 0; b < 256; b++ {
		vocab[string(table[b])] = b
	}
	var merges [][]string
	for _, m := range s.merges {
		vocab[bl(m[0]+m[1])] = len(vocab)
		merges = append(merges, []string{bl(m[0]), bl(m[1])})
	}
	var added []map[string]any
	for _, a := range s.added {
		added = append(added, map[string]any{"id": len(vocab) + len(added), "content": a, "special": true,
			"single_word": false, "lstrip": false, "rstrip": false, "normalized": false})
	}
	doc := map[string]any{
		"version":      "1.0",
		"added_tokens": added,
		"normalizer":   map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": QwenSplitPattern}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		}},
		"post_processor": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		"decoder":        map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": "",
			"end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
			"vocab": vocab, "merges": merges},
	}
	if s.edit != nil {
		s.edit(doc)
	}
	data, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func (s tinySpec) load(t testing.TB) *Tokenizer {
	t.Helper()
	tok, err := Parse(s.json(t))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return tok
}

// tiny has merges whose ranks make the order observable: "ab" beats "bc",
// so "abc" must become [ab, c] and never [a, bc].
var tiny = tinySpec{
	merges: [][2]string{
		{"a", "b"},           // 256
		{"b", "c"},           // 257
		{"ab", "c"},          // 258
		{" ", "x"},           // 259
		{"a", "a"},           // 260
		{"aa", "aa"},         // 261
		{"\xe4\xbd", "\xa0"}, // 262: ranked before the merge that creates its left part
		{"\xe4", "\xbd"},     // 263
	},
	added: []string{"<|im_end|>", "<|im", "<x>"},
}

func TestEncodeTiny(t *testing.T) {
	tok := tiny.load(t)
	tests := []struct {
		in   string
		want []int
	}{
		{"", nil},
		{"abc", []int{258}},                // ab (rank 0) first, then ab+c
		{"bc", []int{257}},                 // only bc applies
		{"abbc", []int{256, 257}},          // two independent merges
		{"aaaaa", []int{261, 'a'}},         // leftmost-first among equal ranks
		{"aaa", []int{260, 'a'}},           // aa at position 0, not 1
		{" x", []int{259}},                 // space is a byte like any other
		{"x x", []int{'x', 259}},           // pre-token " x"
		{"你", []int{262}},                  // e4+bd (rank 7), then that + a0 (rank 6)
		{"<|im_end|>", []int{264}},         // longest added token wins
		{"<|im", []int{265}},               // the shorter one when that is all there is
		{"a<x>b", []int{'a', 266, 'b'}},    // added tokens split pre-tokens
		{"<|im_end|><x>", []int{264, 266}}, // back to back
		{"<|imx", []int{265, 'x'}},         // prefix match of an added token
		{"e\u0301", []int{0xc3, 0xa9}},     // NFC: e + acute -> é (c3 a9)
		{"<x>e\u0301", []int{266, 0xc3, 0xa9}},
	}
	for _, tt := range tests {
		got := tok.Encode(tt.in)
		if len(got) == 0 && len(tt.want) == 0 {
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Encode(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
	if got := tok.Decode([]int{258, 264, 'x', 263, 0xa0, -1, 1 << 30}); got != "abc<|im_end|>x你" {
		t.Errorf("Decode = %q", got)
	}
	if tok.VocabSize() != 267 {
		t.Errorf("VocabSize = %d, want 267", tok.VocabSize())
	}
	if id, ok := tok.TokenID("Ġx"); !ok || id != 259 {
		t.Errorf(`TokenID("Ġx") = %d, %v; want 259`, id, ok)
	}
	if id, ok := tok.TokenID("<x>"); !ok || id != 266 {
		t.Errorf(`TokenID("<x>") = %d, %v`, id, ok)
	}
	if tok.EOS() != -1 {
		t.Errorf("EOS without <|endoftext|> = %d, want -1", tok.EOS())
	}
}

func TestLoadRefuses(t *testing.T) {
	tests := []struct {
		name string
		edit func(map[string]any)
		want string
	}{
		{"other split pattern", func(d map[string]any) {
			d["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["pattern"] =
				map[string]any{"Regex": `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`}
		}, "split pattern"},
		{"WordPiece", func(d map[string]any) { d["model"].(map[string]any)["type"] = "WordPiece" }, "only BPE"},
		{"NFKC", func(d map[string]any) { d["normalizer"] = map[string]any{"type": "NFKC"} }, "only NFC"},
		{"no pre-tokenizer", func(d map[string]any) { d["pre_tokenizer"] = nil }, "pre_tokenizer is missing"},
		{"prefix space", func(d map[string]any) {
			d["decoder"].(map[string]any)["add_prefix_space"] = true
		}, "add_prefix_space"},
		{"lstrip", func(d map[string]any) {
			d["added_tokens"].([]any)[0].(map[string]any)["lstrip"] = true
		}, "lstrip"},
		{"ignore_merges", func(d map[string]any) { d["model"].(map[string]any)["ignore_merges"] = true }, "ignore_merges"},
		{"bad merge", func(d map[string]any) {
			d["model"].(map[string]any)["merges"] = []any{"a"}
		}, "merges[0]"},
		{"merge not in vocab", func(d map[string]any) {
			d["model"].(map[string]any)["merges"] = []any{"q z"}
		}, "not in vocab"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := tiny
			spec.edit = func(d map[string]any) {
				// Round-trip through JSON so edits see generic maps and slices.
				data, _ := json.Marshal(d)
				for k := range d {
					delete(d, k)
				}
				_ = json.Unmarshal(data, &d)
				tt.edit(d)
			}
			_, err := Parse(spec.json(t))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Parse error = %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}

func TestMergesAsStrings(t *testing.T) {
	spec := tiny
	spec.edit = func(d map[string]any) {
		m := d["model"].(map[string]any)
		var flat []string
		for _, p := range m["merges"].([][]string) {
			flat = append(flat, p[0]+" "+p[1])
		}
		m["merges"] = flat
	}
	if got := spec.load(t).Encode("abc x"); !reflect.DeepEqual(got, []int{258, 259}) {
		t.Fatalf(`Encode("abc x") with "a b" merges = %v`, got)
	}
}

func FuzzEncodeRoundTrip(f *testing.F) {
	for _, s := range []string{"", "abc", "aaaaa x", "<|im_end|>你", "\xff\xfe", "e\u0301 ok", "  \n\t", "<x><|im"} {
		f.Add(s)
	}
	tok := tiny.load(f)
	f.Fuzz(func(t *testing.T, s string) {
		ids := tok.Encode(s)
		got := tok.Decode(ids)
		if norm.NFC.IsNormalString(s) && got != s {
			t.Fatalf("Decode(Encode(%q)) = %q", s, got)
		}
		if again := tok.Encode(got); !reflect.DeepEqual(again, ids) && !(len(again) == 0 && len(ids) == 0) {
			t.Fatalf("Encode(Decode(Encode(%q))) = %v, want %v", s, again, ids)
		}
	})
}

func FuzzParse(f *testing.F) {
	f.Add(tiny.json(f))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0}}}`))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":-1}}}`))
	f.Add([]byte(`{"added_tokens":[{"id":16777215,"content":"x"}]}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split"}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := Parse(data)
		if err != nil {
			return
		}
		// Whatever loaded must encode and decode without panicking.
		ids := tok.Encode("hello <|im_end|> wörld 123\n")
		_ = tok.Decode(ids)
	})
}

// ---- against the real Qwen tokenizer ----

// qwenShared is loaded once per test binary: parsing the 11 MB
// tokenizer.json dominates these tests' run time otherwise.
var qwenShared struct {
	once sync.Once
	tok  *Tokenizer
	err  error
}

func loadQwen(t testing.TB) (*Tokenizer, string) {
	t.Helper()
	dir := tokenizertest.Dir(t)
	qwenShared.once.Do(func() { qwenShared.tok, qwenShared.err = LoadDir(dir) })
	if qwenShared.err != nil {
		t.Fatalf("LoadDir(%s): %v", dir, qwenShared.err)
	}
	return qwenShared.tok, dir
}

type encodeRec struct {
	File  string `json:"file"`
	Chunk int    `json:"chunk"`
	Text  string `json:"text"`
	IDs   []int  `json:"ids"`
}

// checkCorpusCurrent fails when the committed corpus changed since the
// reference outputs were built, so a stale reference cannot hide new cases.
func checkCorpusCurrent(t *testing.T, dir string) {
	t.Helper()
	sum := tokenizertest.ReadSummary(t, dir)
	files, err := filepath.Glob(filepath.Join("testdata", "corpus", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus files: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.Sum256(data)
		if got, want := hex.EncodeToString(h[:]), sum.CorpusSHA256[filepath.Base(f)]; got != want {
			t.Fatalf("%s changed since the reference was built (sha256 %s, reference has %q): run %s",
				f, got, want, tokenizertest.FetchCommand)
		}
	}
	if len(sum.CorpusSHA256) != len(files) {
		t.Fatalf("reference covers %d corpus files, testdata has %d: run %s", len(sum.CorpusSHA256), len(files), tokenizertest.FetchCommand)
	}
}

func TestQwenMatchesReference(t *testing.T) {
	tok, dir := loadQwen(t)
	checkCorpusCurrent(t, dir)
	recs := tokenizertest.ReadJSONL[encodeRec](t, dir, "encode.jsonl")
	bad, tokens := 0, 0
	for _, r := range recs {
		got := tok.Encode(r.Text)
		tokens += len(got)
		if slices.Equal(got, r.IDs) {
			continue
		}
		if bad++; bad <= 5 {
			i := 0
			for i < len(got) && i < len(r.IDs) && got[i] == r.IDs[i] {
				i++
			}
			t.Errorf("%s chunk %d: first difference at token %d: got %v, want %v\ncontext: %q",
				r.File, r.Chunk, i, got[i:min(i+5, len(got))], r.IDs[i:min(i+5, len(r.IDs))],
				tok.Decode(r.IDs[max(0, i-5):min(i+5, len(r.IDs))]))
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d documents differ from the JS reference", bad, len(recs))
	}
	t.Logf("%d documents, %d tokens identical to the JS reference", len(recs), tokens)
}

func TestQwenRoundTrip(t *testing.T) {
	tok, dir := loadQwen(t)
	type rec struct {
		Text string `json:"text"`
	}
	texts := tokenizertest.ReadJSONL[rec](t, dir, "split.jsonl")
	for _, r := range tokenizertest.ReadJSONL[encodeRec](t, dir, "encode.jsonl") {
		texts = append(texts, rec{r.Text})
	}
	for _, r := range texts {
		ids := tok.Encode(r.Text)
		got := tok.Decode(ids)
		if norm.NFC.IsNormalString(r.Text) && got != r.Text {
			t.Fatalf("Decode(Encode(%q)) = %q", r.Text, got)
		}
		if again := tok.Encode(got); !slices.Equal(again, ids) {
			t.Fatalf("Encode is not stable under Decode for %q: %v then %v", r.Text, ids, again)
		}
	}
}

func TestQwenLoadDir(t *testing.T) {
	tok, dir := loadQwen(t)
	id := func(s string) int {
		t.Helper()
		v, ok := tok.TokenID(s)
		if !ok {
			t.Fatalf("TokenID(%q) not found", s)
		}
		return v
	}
	if got := tok.VocabSize(); got != 151669 {
		t.Errorf("VocabSize = %d, want 151669 (151643 BPE + 26 added)", got)
	}
	if got, want := tok.EOS(), id("<|im_end|>"); got != want || want != 151645 {
		t.Errorf("EOS = %d, want <|im_end|> = 151645 from tokenizer_config.json", got)
	}
	if got := tok.Pad(); got != 151643 {
		t.Errorf("Pad = %d, want <|endoftext|> = 151643", got)
	}
	plain, err := Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if plain.EOS() != 151643 {
		t.Errorf("Load (no config) EOS = %d, want <|endoftext|> = 151643", plain.EOS())
	}
	if s, ok := tok.IDToken(id("Ġworld")); !ok || s != "Ġworld" || tok.Decode([]int{id("Ġworld")}) != " world" {
		t.Errorf("IDToken/Decode of Ġworld = %q, %v", s, ok)
	}
	if !tok.IsAdded(151645) || tok.IsAdded(id("Ġworld")) {
		t.Errorf("IsAdded wrong")
	}
}

// TestQwenConcurrent encodes the corpus from many goroutines at once on a
// cold cache and checks every result against a sequential run.
func TestQwenConcurrent(t *testing.T) {
	tok, dir := loadQwen(t)
	tok.resetCache()
	recs := tokenizertest.ReadJSONL[encodeRec](t, dir, "encode.jsonl")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := range recs {
				r := recs[(i*7+g*31)%len(recs)]
				if got := tok.Encode(r.Text); !slices.Equal(got, r.IDs) {
					errs <- fmt.Errorf("goroutine %d: %s chunk %d differs", g, r.File, r.Chunk)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
