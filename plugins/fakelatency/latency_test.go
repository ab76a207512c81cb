package fakelatency

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Latency
		err  string
	}{
		{in: "300ms", want: Latency{Base: 300 * time.Millisecond}},
		{in: "1s+500ms", want: Latency{Base: time.Second, Jitter: 500 * time.Millisecond, Dist: Uniform}},
		{in: " 50ms + exp(20ms) ", want: Latency{Base: 50 * time.Millisecond, Jitter: 20 * time.Millisecond, Dist: Exponential}},
		{in: "0+uniform(1)", want: Latency{Jitter: time.Second, Dist: Uniform}},
		{in: "2", want: Latency{Base: 2 * time.Second}},
		{in: "fast", err: "base"},
		{in: "1s+", err: "jitter"},
		{in: "1s+exp(2s", err: "closing parenthesis"},
		{in: "1s+normal(2s)", err: `unknown distribution "normal"`},
		{in: "-1s", err: "base"},
	} {
		got, err := Parse(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Parse(%q) = %v, %v; want an error about %s", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"300ms", "1s+500ms", "50ms+exp(20ms)", "0+uniform(1)", "1s+exp(", "+"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := Parse(s)
		if err != nil {
			return
		}
		if l.Base < 0 || l.Jitter < 0 {
			t.Fatalf("Parse(%q) = %+v: negative", s, l)
		}
		again, err := Parse(l.String())
		if err != nil || again.Base != l.Base || again.Jitter != l.Jitter || (l.Jitter > 0 && again.Dist != l.Dist) {
			t.Fatalf("Parse(%q) = %+v, but its String %q parses as %+v, %v", s, l, l.String(), again, err)
		}
	})
}

// Draws are repeatable from the seed, stay in range, and average what
// Mean says (over enough draws that the seeded sample is close).
func TestDraw(t *testing.T) {
	for _, l := range []Latency{
		{Base: 100 * time.Millisecond},
		{Base: 100 * time.Millisecond, Jitter: 50 * time.Millisecond, Dist: Uniform},
		{Base: 10 * time.Millisecond, Jitter: 40 * time.Millisecond, Dist: Exponential},
	} {
		a, b := NewSource(7), NewSource(7)
		var sum time.Duration
		const n = 20000
		for i := range n {
			d := a.Draw(l)
			if e := b.Draw(l); e != d {
				t.Fatalf("%s: draw %d is %s from one source and %s from another with the same seed", l, i, d, e)
			}
			if d < l.Base || (l.Dist != Exponential && l.Jitter > 0 && d >= l.Base+l.Jitter) || d > l.Base+20*l.Jitter {
				t.Fatalf("%s: drew %s", l, d)
			}
			sum += d
		}
		mean := sum / n
		if diff := (mean - l.Mean()).Abs(); diff > l.Mean()/50 {
			t.Errorf("%s: mean of %d draws is %s, want about %s", l, n, mean, l.Mean())
		}
	}
	if NewSource(1).Draw(Latency{Jitter: time.Second}) == NewSource(2).Draw(Latency{Jitter: time.Second}) {
		t.Error("two seeds drew the same jitter")
	}
}

func TestWaitStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := NewSource(1).Wait(ctx, Latency{Base: time.Hour}); err != context.Canceled {
		t.Errorf("Wait on a cancelled context: %v", err)
	}
}
