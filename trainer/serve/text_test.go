package serve

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTextState(t *testing.T) {
	cases := []struct {
		name    string
		pieces  []string
		stops   []string
		deltas  []string
		stopped bool
	}{
		{"no stops", []string{"ab", "c"}, nil, []string{"ab", "c"}, false},
		{"stop inside a piece", []string{"hel", "lo wor", "ld"}, []string{"o w"}, []string{"hel", "l"}, true},
		{"stop across pieces is held back", []string{"ab", "<to", "ol"}, []string{"<tool"}, []string{"ab", "", ""}, true},
		{"held prefix released when it diverges", []string{"a<", "b"}, []string{"<tool"}, []string{"a", "<b"}, false},
		{"earliest stop wins", []string{"xyz"}, []string{"z", "y"}, []string{"x"}, true},
		{"split UTF-8 held until whole", []string{"a\xe4\xb8", "\x96b"}, nil, []string{"a", "世b"}, false},
		{"stop at start", []string{"STOP"}, []string{"STOP"}, []string{""}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var ts textState
			var got []string
			stopped := false
			for i, p := range tc.pieces {
				d, s := ts.add([]byte(p), tc.stops, i == len(tc.pieces)-1)
				got = append(got, d)
				if s {
					stopped = true
					break
				}
			}
			if strings.Join(got, "|") != strings.Join(tc.deltas, "|") || stopped != tc.stopped {
				t.Fatalf("deltas %q stopped %v, want %q %v", got, stopped, tc.deltas, tc.stopped)
			}
		})
	}
}

// FuzzTextState: however text arrives in pieces, the deltas add up to the
// final text, which is a prefix of the input holding no stop string, and
// no delta but the last ends inside a UTF-8 character.
func FuzzTextState(f *testing.F) {
	f.Add("hello <tool_call> world", "<tool", uint8(3))
	f.Add("aaaa", "aa", uint8(1))
	f.Add("世界 stop", "p", uint8(2))
	f.Fuzz(func(t *testing.T, text, stop string, step uint8) {
		n := int(step%7) + 1
		var stops []string
		if stop != "" {
			stops = []string{stop}
		}
		var ts textState
		var all strings.Builder
		for i := 0; i < len(text); i += n {
			final := i+n >= len(text)
			d, stopped := ts.add([]byte(text[i:min(i+n, len(text))]), stops, final)
			if !final && !stopped && utf8.ValidString(text) && !utf8.ValidString(d) {
				t.Fatalf("delta %q splits a character", d)
			}
			all.WriteString(d)
			if stopped {
				break
			}
		}
		out := all.String()
		if out != string(ts.text) || !strings.HasPrefix(text, out) || stop != "" && strings.Contains(out, stop) {
			t.Fatalf("text %q stop %q step %d: deltas %q, final %q", text, stop, n, out, ts.text)
		}
	})
}
