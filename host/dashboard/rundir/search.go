package rundir

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/rlhost/rlhost/host/output"
)

// Search finds text in what the model and the sandbox wrote: message
// contents, tool call arguments, errors and task ids, ignoring ASCII case.
// It reads lines straight from disk without decoding them: the query is
// encoded as JSON encodes it (so "<" matches the "\u003c" the writer puts
// on disk), and only string values under those keys are looked at, so a
// query never matches the JSON's own keys.

// searchKeys are the keys whose string values Search looks in.
var searchKeys = []string{"content", "arguments", "error", "task_id"}

// Hit is an episode that holds the text.
type Hit struct {
	Episode Episode
	Where   string // the key it was found under: content, arguments, error, task_id
	Snippet string // the text around the first match
}

// snippetRunes is how much text a hit shows on each side of the match.
const snippetRunes = 60

// Search looks for q in eps (read in order of their offsets) and returns
// up to limit hits, in that order, and how many of eps (so ordered) it
// read; pass eps[next:] to go on. A cancelled ctx stops it with what it
// found.
func (d *Dir) Search(ctx context.Context, eps []Episode, q string, limit int) (hits []Hit, next int, err error) {
	m := newMatcher(q)
	if m == nil {
		return nil, len(eps), nil
	}
	f, err := d.root.Open(output.TrajectoriesFile)
	if err != nil {
		return nil, 0, fmt.Errorf("open %s: %w", output.TrajectoriesFile, err)
	}
	defer f.Close()
	var buf []byte
	var bufOff int64 = -1
	for i, e := range eps {
		if len(hits) >= limit {
			return hits, i, nil
		}
		if i%256 == 0 && ctx.Err() != nil {
			return hits, i, nil
		}
		end := e.Off + int64(e.Len)
		if bufOff < 0 || e.Off < bufOff || end > bufOff+int64(len(buf)) {
			// Read ahead: the next episodes are most likely in this chunk.
			size := max(int64(chunk), int64(e.Len))
			if cap(buf) < int(size) {
				buf = make([]byte, size)
			}
			buf = buf[:size]
			n, err := f.ReadAt(buf, e.Off)
			if err != nil && !errors.Is(err, io.EOF) {
				return hits, i, fmt.Errorf("read %s: %w", output.TrajectoriesFile, err)
			}
			buf, bufOff = buf[:n], e.Off
			if int64(n) < int64(e.Len) {
				return hits, i, fmt.Errorf("%s is shorter than indexed; it is read again shortly", output.TrajectoriesFile)
			}
		}
		line := buf[e.Off-bufOff : end-bufOff]
		if where, snip, ok := m.find(line); ok {
			hits = append(hits, Hit{Episode: e, Where: where, Snippet: snip})
		}
	}
	return hits, len(eps), nil
}

// ByOffset orders episodes as Search reads them.
func ByOffset(eps []Episode) []Episode {
	out := slices.Clone(eps)
	slices.SortFunc(out, func(a, b Episode) int { return cmp.Compare(a.Off, b.Off) })
	return out
}

type matcher struct {
	q   string // the query, as typed
	enc []byte // as JSON encodes it, without quotes
}

func newMatcher(q string) *matcher {
	if q == "" {
		return nil
	}
	enc, _ := json.Marshal(q)
	return &matcher{q: q, enc: enc[1 : len(enc)-1]}
}

// find walks the line's strings from quote to quote, remembering the last
// key, and looks in the values of the searched keys.
func (m *matcher) find(line []byte) (where, snippet string, ok bool) {
	if indexFold(line, m.enc) < 0 {
		return "", "", false // most lines: one fast pass
	}
	key := ""
	for i := 0; i < len(line); {
		q := bytes.IndexByte(line[i:], '"')
		if q < 0 {
			return "", "", false
		}
		s := i + q
		e, err := skipString(line, s)
		if err != nil {
			return "", "", false
		}
		j := skipSpace(line, e)
		if j < len(line) && line[j] == ':' {
			key = string(line[s+1 : e-1])
		} else if slices.Contains(searchKeys, key) && indexFold(line[s+1:e-1], m.enc) >= 0 {
			// Confirm on the decoded text: the encoded form can also match
			// across an escape (a query "u003c" inside "\u003c").
			var text string
			if json.Unmarshal(line[s:e], &text) == nil {
				if at := indexFold([]byte(text), []byte(m.q)); at >= 0 {
					return key, around(text, at, len(m.q)), true
				}
			}
		}
		i = e
	}
	return "", "", false
}

// around is the text near text[at:at+n], cut at rune boundaries.
func around(text string, at, n int) string {
	start, end := at, at+n
	for k := 0; k < snippetRunes && start > 0; k++ {
		_, size := utf8.DecodeLastRuneInString(text[:start])
		start -= size
	}
	for k := 0; k < snippetRunes && end < len(text); k++ {
		_, size := utf8.DecodeRuneInString(text[end:])
		end += size
	}
	s := strings.Join(strings.Fields(text[start:end]), " ")
	if start > 0 {
		s = "…" + s
	}
	if end < len(text) {
		s += "…"
	}
	return s
}

// indexFold returns the first index of sub in s ignoring ASCII case, or
// -1. It looks for sub's rarest letter with IndexByte, in either case,
// and compares around each hit.
func indexFold(s, sub []byte) int {
	if len(sub) == 0 {
		return 0
	}
	if len(sub) > len(s) {
		return -1
	}
	a := anchor(sub)
	lo, up := lower(sub[a]), upper(sub[a])
	cases := []byte{lo}
	if up != lo {
		cases = append(cases, up)
	}
	best := -1
	for _, c := range cases {
		from := 0
		limit := len(s) - len(sub) + a // last place the anchor can be
		if best >= 0 {
			limit = min(limit, best+a-1)
		}
		for from <= limit {
			k := bytes.IndexByte(s[from:limit+1], c)
			if k < 0 {
				break
			}
			p := from + k - a
			if p >= 0 && asciiFold(s[p:p+len(sub)], sub) {
				best = p
				break
			}
			from += k + 1
		}
	}
	return best
}

// asciiFold reports whether a and b differ in ASCII letter case only
// (bytes.EqualFold would fold Unicode too, which the byte search cannot).
func asciiFold(a, b []byte) bool {
	for i := range a {
		if lower(a[i]) != lower(b[i]) {
			return false
		}
	}
	return true
}

// rarity ranks letters from rare to common in English text and code, to
// pick the byte with the fewest false hits.
const rarity = "qjzxvkwyfbghmpducl_sntroiae"

func anchor(sub []byte) int {
	best, rank := 0, len(rarity)+1
	for i, c := range sub {
		r := strings.IndexByte(rarity, lower(c))
		if r < 0 {
			r = -1 // digits and punctuation are rarer still
		}
		if r < rank {
			best, rank = i, r
		}
	}
	return best
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func upper(c byte) byte {
	if 'a' <= c && c <= 'z' {
		return c - ('a' - 'A')
	}
	return c
}
