package tokenizer

import (
	"sync"
	"unicode"
	"unicode/utf8"
)

// QwenSplitPattern is the only pre-tokenizer Split regex this package
// implements, byte for byte as it appears in Qwen2/2.5/3 tokenizer.json files.
// Load refuses any other pattern, because the scanner below is a hand
// translation of exactly this regex and nothing else.
//
// The regex needs a negative look-ahead (\s+(?!\S)), which Go's RE2-based
// regexp cannot express, hence the scanner.
const QwenSplitPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// Character classes the pattern distinguishes. Hugging Face tokenizers
// evaluates the pattern with Oniguruma, so the classes follow Oniguruma's
// Unicode definitions:
//   - \p{L} is general category L, \p{N} is category N (Nd, Nl, No);
//   - \s is the White_Space property: U+0009–U+000D, U+0020, U+0085, U+00A0,
//     U+1680, U+2000–U+200A, U+2028, U+2029, U+202F, U+205F, U+3000.
//     (JavaScript's \s differs: it adds U+FEFF and lacks U+0085.)
//   - (?i) folds case with Unicode simple case folding, so 's also matches
//     'S and 'ſ (U+017F LATIN SMALL LETTER LONG S).
//
// TestSplitMatchesOniguruma checks all of this against Oniguruma itself.
//
// Bytes that are not valid UTF-8 are classed as "other" (neither letter,
// number nor space), one byte at a time, so that any Go string splits and
// round-trips.
type charClass uint8

const (
	clsOther charClass = iota
	clsLetter
	clsNumber
	clsSpace   // \s but not \r or \n
	clsNewline // \r or \n (also in \s)
)

// asciiClass is the class of every ASCII byte, precomputed because ASCII
// dominates code and English text.
var asciiClass = func() (t [utf8.RuneSelf]charClass) {
	for b := 0; b < utf8.RuneSelf; b++ {
		t[b] = classOfRune(rune(b))
	}
	return t
}()

// bmpClass is the class of every Basic Multilingual Plane character (64 KiB,
// built in a few milliseconds on the first non-ASCII character): the
// unicode package's range tables cost a binary search per character, which
// dominated the scanner on CJK and Cyrillic text. Built on first use, not
// at package initialisation, which every rlhost process (plugins and
// sandbox inits included) would otherwise pay. Read-only once built.
var bmpClass = sync.OnceValue(func() *[0x10000]charClass {
	t := new([0x10000]charClass)
	for r := rune(0); r < 0x10000; r++ {
		t[r] = classOfRune(r)
	}
	return t
})

func classOfRune(r rune) charClass {
	switch {
	case r == '\r' || r == '\n':
		return clsNewline
	case unicode.IsLetter(r):
		return clsLetter
	case unicode.IsNumber(r):
		return clsNumber
	case unicode.Is(unicode.White_Space, r):
		return clsSpace
	}
	return clsOther
}

// classAt returns the class of the character starting at s[i] and its width
// in bytes. i must be < len(s).
func classAt(s string, i int) (charClass, int) {
	if b := s[i]; b < utf8.RuneSelf {
		return asciiClass[b], 1
	}
	r, w := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError && w == 1 {
		return clsOther, 1
	}
	if r < 0x10000 {
		return bmpClass()[r], w
	}
	return classOfRune(r), w
}

func isSpaceClass(c charClass) bool { return c == clsSpace || c == clsNewline }

// splitNext returns the end of the pre-token that starts at s[i], i < len(s).
// Each numbered block mirrors one alternative of QwenSplitPattern, tried in
// the pattern's order; the first alternative that matches wins, exactly as in
// a backtracking regex engine. Every character is matched by some
// alternative, so pre-tokens tile the input with no gaps.
func splitNext(s string, i int) int {
	c0, w0 := classAt(s, i)

	// 1. (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if s[i] == '\'' {
		if n := contractionLen(s[i+1:]); n > 0 {
			return i + 1 + n
		}
	}

	// 2. [^\r\n\p{L}\p{N}]?\p{L}+
	if c0 == clsLetter {
		return letterRunEnd(s, i+w0)
	}
	if c0 != clsNewline && c0 != clsNumber && i+w0 < len(s) {
		if c1, _ := classAt(s, i+w0); c1 == clsLetter {
			return letterRunEnd(s, i+w0)
		}
	}

	// 3. \p{N}: one character only.
	if c0 == clsNumber {
		return i + w0
	}

	// 4. " ?[^\s\p{L}\p{N}]+[\r\n]*"
	start := -1
	if c0 == clsOther {
		start = i
	} else if s[i] == ' ' && i+1 < len(s) {
		if c1, _ := classAt(s, i+1); c1 == clsOther {
			start = i + 1
		}
	}
	if start >= 0 {
		j := start
		for j < len(s) {
			c, w := classAt(s, j)
			if c != clsOther {
				break
			}
			j += w
		}
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}

	// From here c0 is whitespace. Find the maximal whitespace run [i, end)
	// and the end of its last \r or \n.
	end, lastNL := i, -1
	for end < len(s) {
		c, w := classAt(s, end)
		if !isSpaceClass(c) {
			break
		}
		end += w
		if c == clsNewline {
			lastNL = end
		}
	}

	// 5. \s*[\r\n]+: \s* backtracks until [\r\n]+ can match, which is at the
	// run's last newline; nothing after it in the run is a newline.
	if lastNL >= 0 {
		return lastNL
	}

	// 6. \s+(?!\S): the whole run at end of input; otherwise the run minus its
	// last character, provided that leaves at least one.
	if end == len(s) {
		return end
	}
	if _, wl := utf8.DecodeLastRuneInString(s[i:end]); end-wl > i {
		return end - wl
	}

	// 7. \s+: a single whitespace character before a non-space.
	return end
}

// contractionLen reports how many bytes after an apostrophe match one of
// s, t, re, ve, m, ll, d case-insensitively (Unicode simple folding), or 0.
func contractionLen(s string) int {
	if s == "" {
		return 0
	}
	r, w := utf8.DecodeRuneInString(s)
	switch r {
	case 's', 'S', 'ſ', 't', 'T', 'm', 'M', 'd', 'D':
		return w
	case 'r', 'R', 'v', 'V':
		if len(s) > 1 && (s[1] == 'e' || s[1] == 'E') {
			return 2
		}
	case 'l', 'L':
		if len(s) > 1 && (s[1] == 'l' || s[1] == 'L') {
			return 2
		}
	}
	return 0
}

func letterRunEnd(s string, j int) int {
	for j < len(s) {
		c, w := classAt(s, j)
		if c != clsLetter {
			break
		}
		j += w
	}
	return j
}

// Split returns the pre-tokens of s under QwenSplitPattern, in order; their
// concatenation is s. It is exported so that tests and tools can inspect the
// scanner on its own; Encode does not allocate this slice.
func Split(s string) []string {
	var out []string
	for i := 0; i < len(s); {
		j := splitNext(s, i)
		out = append(out, s[i:j])
		i = j
	}
	return out
}
