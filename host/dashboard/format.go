package dashboard

import (
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// num prints a figure briefly: integers whole, others to four digits.
func num(x float64) string {
	switch {
	case math.IsNaN(x) || math.IsInf(x, 0):
		return strconv.FormatFloat(x, 'g', -1, 64)
	case x == math.Trunc(x) && math.Abs(x) < 1e15:
		return comma(int(x))
	case math.Abs(x) >= 1e4:
		return comma(int(math.Round(x)))
	}
	return strconv.FormatFloat(x, 'g', 4, 64)
}

// exact prints a figure with every digit it has.
func exact(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

func pct(x float64) string { return fmt.Sprintf("%.1f%%", 100*x) }

// comma groups thousands: 12,345.
func comma(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// ms prints milliseconds as a duration a person reads: 35 ms, 2.4 s, 3m20s.
func ms(x float64) string {
	d := time.Duration(x * float64(time.Millisecond))
	switch {
	case d < time.Second:
		return fmt.Sprintf("%.0f ms", x)
	case d < time.Minute:
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	return d.Round(time.Second).String()
}

// ago says how long before now t was.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return roundAgo(now.Sub(t)) + " ago"
}

func roundAgo(d time.Duration) string {
	switch {
	case d < time.Second:
		return "<1s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%d days", int(d.Hours()/24))
}

func pathEscape(s string) string { return url.PathEscape(s) }

// link is path with q's parameters, set's name/value pairs applied on
// top (an empty value removes the name).
func link(path string, q url.Values, set ...string) string {
	v := url.Values{}
	for k, vs := range q {
		v[k] = append([]string(nil), vs...)
	}
	for i := 0; i+1 < len(set); i += 2 {
		if set[i+1] == "" {
			v.Del(set[i])
		} else {
			v.Set(set[i], set[i+1])
		}
	}
	for k, vs := range v {
		if len(vs) == 1 && vs[0] == "" {
			v.Del(k)
		}
	}
	if len(v) == 0 {
		return path
	}
	return path + "?" + v.Encode()
}

// seg is a piece of text, marked when it matches the search.
type seg struct {
	Text string
	Mark bool
}

// highlight cuts text around the matches of q, ignoring ASCII case as the
// search does.
func highlight(text, q string) []seg {
	if q == "" {
		return []seg{{Text: text}}
	}
	lt, lq := lowerASCII(text), lowerASCII(q)
	var out []seg
	for {
		i := strings.Index(lt, lq)
		if i < 0 {
			break
		}
		if i > 0 {
			out = append(out, seg{Text: text[:i]})
		}
		out = append(out, seg{Text: text[i : i+len(q)], Mark: true})
		text, lt = text[i+len(q):], lt[i+len(q):]
	}
	if text != "" || len(out) == 0 {
		out = append(out, seg{Text: text})
	}
	return out
}

func lowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
