package tokenizer

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/rlhost/rlhost/trainer/tokenizer/tokenizertest"
)

func TestSplitTable(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"Hello world", []string{"Hello", " world"}},
		{"it's", []string{"it", "'s"}},
		{"IT'S", []string{"IT", "'S"}},
		{"we'll 've 're", []string{"we", "'ll", " '", "ve", " '", "re"}},
		{"'ſa", []string{"'ſ", "a"}}, // Oniguruma folds ſ to s under (?i)
		{"'x", []string{"'x"}},       // not a contraction: prefix + letters
		{"12345", []string{"1", "2", "3", "4", "5"}},
		{"a  b", []string{"a", " ", " b"}},
		{"a   b", []string{"a", "  ", " b"}},
		{"a \t b", []string{"a", " \t", " b"}},
		{"x  ", []string{"x", "  "}},                           // trailing run at end: kept whole
		{"x \n  y", []string{"x", " \n", " ", " y"}},           // \s*[\r\n]+ stops at the last newline
		{"a\r\n\r\nb", []string{"a", "\r\n\r\n", "b"}},         // newline run
		{"a\n \nb", []string{"a", "\n \n", "b"}},               // spaces between newlines join the run
		{"\tfoo", []string{"\tfoo"}},                           // any non-newline char can prefix letters
		{"\nfoo", []string{"\n", "foo"}},                       // but not a newline
		{"(foo)", []string{"(foo", ")"}},                       // one non-letter may prefix a letter run
		{"((foo", []string{"((", "foo"}},                       // run of punctuation then letters
		{" !!\n\nx", []string{" !!\n\n", "x"}},                 // punctuation swallows following newlines
		{" 1", []string{" ", "1"}},                             // numbers take no prefix
		{"\t!", []string{"\t", "!"}},                           // only a literal space prefixes punctuation
		{"你好世界", []string{"你好世界"}},                             // CJK letters are one run
		{"😀😀 x", []string{"😀😀", " x"}},                         // emoji are "other"
		{"e\u0301", []string{"e", "\u0301"}},                   // a combining mark is not a letter
		{"a\u0085b", []string{"a", "\u0085b"}},                 // NEL is \s in Oniguruma
		{"a\ufeffb", []string{"a", "\ufeffb"}},                 // BOM is not: it prefixes b
		{"a\u00a0\u00a0b", []string{"a", "\u00a0", "\u00a0b"}}, // NBSP is \s
		{"x\xffy", []string{"x", "\xffy"}},                     // invalid byte: "other", prefixes y
		{"<|im_end|>", []string{"<|", "im", "_end", "|>"}},     // Split alone does not know added tokens
		{"   ", []string{"   "}},
		{"\n", []string{"\n"}},
	}
	for _, tt := range tests {
		got := Split(tt.in)
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Split(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if slow := slowSplit(tt.in); !reflect.DeepEqual(slow, tt.want) {
			t.Errorf("slowSplit(%q) = %q, want %q (the reference matcher disagrees with the table)", tt.in, slow, tt.want)
		}
	}
}

// TestSplitMatchesJSRegex compares the scanner with V8's regex engine
// running the tokenizer.json pattern (rewritten to Oniguruma's classes) on
// every corpus chunk and 20,000 seeded random strings.
func TestSplitMatchesJSRegex(t *testing.T) {
	dir := tokenizertest.Dir(t)
	type rec struct {
		Text   string   `json:"text"`
		Pieces []string `json:"pieces"`
	}
	recs := tokenizertest.ReadJSONL[rec](t, dir, "split.jsonl")
	if len(recs) < 20000 {
		t.Fatalf("only %d split cases in the reference; rerun %s", len(recs), tokenizertest.FetchCommand)
	}
	bad := 0
	for _, r := range recs {
		if got := Split(r.Text); !samePieces(got, r.Pieces) {
			if bad++; bad <= 10 {
				t.Errorf("Split(%q)\n got %q\nwant %q", r.Text, got, r.Pieces)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d split cases differ from the JS regex", bad, len(recs))
	}
	t.Logf("%d split cases identical to the JS regex", len(recs))
}

func FuzzSplit(f *testing.F) {
	for _, s := range []string{
		"", "Hello world", "it's 'S 'ſ", "a  \t\n\r\n  b", "x   ", "1234 5", "😀 👨‍👩‍👧", "e\u0301\u0323",
		"\u0085\ufeff\u00a0\u3000", "\xff\xfe abc", "<|im_end|>  \n", "((foo)) !!\n\n", "\t\t\tx",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := Split(s)
		if strings.Join(got, "") != s {
			t.Fatalf("pieces %q do not concatenate to %q", got, s)
		}
		for _, p := range got {
			if p == "" {
				t.Fatalf("empty piece in %q", got)
			}
		}
		if want := slowSplit(s); !reflect.DeepEqual(got, want) {
			t.Fatalf("Split(%q)\n got %q\nwant %q (backtracking reference)", s, got, want)
		}
	})
}

// ---- A slow, obviously-correct reference: a backtracking regex matcher ----
//
// The pattern is written below as a tree of the regex constructs it uses,
// and matched the way a backtracking engine (Oniguruma, V8) does: ordered
// alternation, greedy quantifiers that give back one character at a time,
// and a negative look-ahead. It shares nothing with the scanner but the
// character classes' definitions, which are spelled out again here.

type unit struct {
	r   rune // utf8.RuneError with invalid set for a stray byte
	bad bool
	w   int
}

type rnode interface {
	// match tries to match at u[i:], calling k with each possible end, in
	// preference order, until k returns true.
	match(u []unit, i int, k func(int) bool) bool
}

type rclass func(unit) bool
type rseq []rnode
type ralt []rnode
type ropt struct{ n rnode }
type rstar struct{ n rnode }
type rplus struct{ n rnode }
type rnotahead struct{ n rnode }

func (c rclass) match(u []unit, i int, k func(int) bool) bool {
	return i < len(u) && c(u[i]) && k(i+1)
}

func (s rseq) match(u []unit, i int, k func(int) bool) bool {
	if len(s) == 0 {
		return k(i)
	}
	return s[0].match(u, i, func(j int) bool { return s[1:].match(u, j, k) })
}

func (a ralt) match(u []unit, i int, k func(int) bool) bool {
	for _, n := range a {
		if n.match(u, i, k) {
			return true
		}
	}
	return false
}

func (o ropt) match(u []unit, i int, k func(int) bool) bool {
	return o.n.match(u, i, k) || k(i)
}

func (s rstar) match(u []unit, i int, k func(int) bool) bool {
	return s.n.match(u, i, func(j int) bool { return j > i && s.match(u, j, k) }) || k(i)
}

func (p rplus) match(u []unit, i int, k func(int) bool) bool {
	return p.n.match(u, i, func(j int) bool { return rstar(p).match(u, j, k) })
}

func (n rnotahead) match(u []unit, i int, k func(int) bool) bool {
	if n.n.match(u, i, func(int) bool { return true }) {
		return false
	}
	return k(i)
}

// Oniguruma's \s: the Unicode White_Space code points, listed explicitly.
var refSpace = map[rune]bool{
	'\t': true, '\n': true, '\v': true, '\f': true, '\r': true, ' ': true, 0x85: true, 0xA0: true, 0x1680: true,
	0x2000: true, 0x2001: true, 0x2002: true, 0x2003: true, 0x2004: true, 0x2005: true, 0x2006: true,
	0x2007: true, 0x2008: true, 0x2009: true, 0x200A: true, 0x2028: true, 0x2029: true, 0x202F: true,
	0x205F: true, 0x3000: true,
}

func isL(u unit) bool  { return !u.bad && unicode.In(u.r, unicode.L) }
func isN(u unit) bool  { return !u.bad && unicode.In(u.r, unicode.Nd, unicode.Nl, unicode.No) }
func isS(u unit) bool  { return !u.bad && refSpace[u.r] }
func isRN(u unit) bool { return !u.bad && (u.r == '\r' || u.r == '\n') }
func runeIn(rs ...rune) rclass {
	return func(u unit) bool {
		for _, r := range rs {
			if !u.bad && u.r == r {
				return true
			}
		}
		return false
	}
}

// refPattern is QwenSplitPattern as a tree:
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
var refPattern = func() rnode {
	q := runeIn('\'')
	ci := func(lower rune, more ...rune) rclass {
		return runeIn(append([]rune{lower, unicode.ToUpper(lower)}, more...)...)
	}
	L, N, S := rclass(isL), rclass(isN), rclass(isS)
	notS := rclass(func(u unit) bool { return !isS(u) })
	return ralt{
		ralt{
			rseq{q, ci('s', 'ſ')}, rseq{q, ci('t')}, rseq{q, ci('r'), ci('e')}, rseq{q, ci('v'), ci('e')},
			rseq{q, ci('m')}, rseq{q, ci('l'), ci('l')}, rseq{q, ci('d')},
		},
		rseq{ropt{rclass(func(u unit) bool { return !isRN(u) && !isL(u) && !isN(u) })}, rplus{L}},
		N,
		rseq{ropt{runeIn(' ')}, rplus{rclass(func(u unit) bool { return !isS(u) && !isL(u) && !isN(u) })}, rstar{rclass(isRN)}},
		rseq{rstar{S}, rplus{rclass(isRN)}},
		rseq{rplus{S}, rnotahead{notS}},
		rplus{S},
	}
}()

// slowSplit is Hugging Face's Split(behavior=Isolated): every leftmost match
// of the pattern becomes a piece, and so does any gap between matches.
func slowSplit(s string) []string {
	var u []unit
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		u = append(u, unit{r: r, bad: r == utf8.RuneError && w == 1, w: w})
		i += w
	}
	off := make([]int, len(u)+1)
	for i, x := range u {
		off[i+1] = off[i] + x.w
	}
	var out []string
	gap := 0
	for i := 0; i < len(u); {
		end := -1
		refPattern.match(u, i, func(j int) bool { end = j; return true })
		if end <= i { // no (non-empty) match here: the character joins a gap
			i++
			continue
		}
		if gap < i {
			out = append(out, s[off[gap]:off[i]])
		}
		out = append(out, s[off[i]:off[end]])
		i, gap = end, end
	}
	if gap < len(u) {
		out = append(out, s[off[gap]:])
	}
	return out
}

func samePieces(a, b []string) bool {
	return len(a) == len(b) && (len(a) == 0 || reflect.DeepEqual(a, b))
}

// TestSplitMatchesOniguruma compares the scanner with Oniguruma itself (the
// engine Hugging Face tokenizers runs the pattern with), on the same texts as
// TestSplitMatchesJSRegex but with the unmodified pattern. fetch.sh produces
// its input only where libonig-dev is installed.
func TestSplitMatchesOniguruma(t *testing.T) {
	dir := tokenizertest.Dir(t)
	path := filepath.Join(dir, "ref", "onig_split.txt")
	data, err := os.ReadFile(path)
	if err != nil {
		msg := fmt.Sprintf("ONIGURUMA CROSS-CHECK NOT RUN: %v (apt-get install libonig-dev, then %s)", err, tokenizertest.FetchCommand)
		if os.Getenv("RLHOST_REQUIRE_ONIGURUMA") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	type rec struct {
		Text string `json:"text"`
	}
	recs := tokenizertest.ReadJSONL[rec](t, dir, "split.jsonl")
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != len(recs) {
		t.Fatalf("%s has %d lines for %d texts: rerun %s", path, len(lines), len(recs), tokenizertest.FetchCommand)
	}
	bad := 0
	for i, r := range recs {
		var want []string
		prev := 0
		for _, span := range strings.Fields(lines[i]) {
			var s, e int
			if _, err := fmt.Sscanf(span, "%d-%d", &s, &e); err != nil {
				t.Fatalf("%s:%d: %q: %v", path, i+1, span, err)
			}
			if s > prev { // a gap: Isolated splitting keeps it as a piece
				want = append(want, r.Text[prev:s])
			}
			want = append(want, r.Text[s:e])
			prev = e
		}
		if prev < len(r.Text) {
			want = append(want, r.Text[prev:])
		}
		if got := Split(r.Text); !samePieces(got, want) {
			if bad++; bad <= 10 {
				t.Errorf("Split(%q)\n got %q\nwant %q (Oniguruma)", r.Text, got, want)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d texts split differently from Oniguruma", bad, len(recs))
	}
	t.Logf("%d texts split identically to Oniguruma", len(recs))
}
