package dashboard

import (
	"fmt"
	"net/url"
	"testing"
	"time"
)

func TestHighlight(t *testing.T) {
	for _, tc := range []struct{ text, q, want string }{
		{"Hello hello HELLO", "hello", "[Hello] [hello] [HELLO]"},
		{"abc", "", "abc"},
		{"abc", "x", "abc"},
		{"<b>x</b>", "<B>", "[<b>]x</b>"},
		{"", "a", ""},
	} {
		got := ""
		for _, s := range highlight(tc.text, tc.q) {
			if s.Mark {
				got += "[" + s.Text + "]"
			} else {
				got += s.Text
			}
		}
		if got != tc.want {
			t.Errorf("highlight(%q, %q) = %q, want %q", tc.text, tc.q, got, tc.want)
		}
	}
}

func TestFormats(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{num(3), "3"}, {num(12345), "12,345"}, {num(0.123456), "0.1235"}, {num(-1), "-1"}, {num(12345.6), "12,346"},
		{comma(-1234567), "-1,234,567"}, {pct(0.375), "37.5%"},
		{ms(35.2), "35 ms"}, {ms(2400), "2.4 s"}, {ms(200000), "3m20s"},
		{roundAgo(90 * time.Second), "1m"}, {roundAgo(3 * time.Hour), "3h"}, {roundAgo(80 * time.Hour), "3 days"},
		{link("/p", url.Values{"a": {"1"}, "b": {""}}, "c", "x y", "a", ""), "/p?c=x+y"},
		{link("/p", nil), "/p"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
	a, b := 0.1, 0.2
	if got := fmt.Sprint(exact(a + b)); got != "0.30000000000000004" {
		t.Errorf("exact %s", got)
	}
}
