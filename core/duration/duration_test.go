package duration

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
		bad  string // part of the error's reason; "" = accepted
	}{
		{"30s", 30 * time.Second, ""},
		{"500ms", 500 * time.Millisecond, ""},
		{"1m30s", 90 * time.Second, ""},
		{" 2h ", 2 * time.Hour, ""},
		{"30", 30 * time.Second, ""},
		{"0.5", 500 * time.Millisecond, ""},
		{"0", 0, ""},
		{"0s", 0, ""},
		{"", 0, "empty"},
		{"soon", 0, "not a duration"},
		{"30 s", 0, "not a duration"},
		{"-1s", 0, "negative"},
		{"-5", 0, "negative"},
		{"NaN", 0, "not a number"},
		{"Inf", 0, "not a number"},
		{"876001h", 0, "longer than 100 years"},
		{"1e10", 0, "longer than 100 years"},
	} {
		got, err := Parse(c.in)
		if c.bad == "" {
			if err != nil || got != c.want {
				t.Errorf("Parse(%q) = %v, %v; want %v", c.in, got, err, c.want)
			}
			continue
		}
		var de *Error
		if !errors.As(err, &de) || !strings.Contains(err.Error(), c.bad) {
			t.Errorf("Parse(%q) error = %v; want one saying %q", c.in, err, c.bad)
		}
	}
}

func TestPositive(t *testing.T) {
	if _, err := Positive("0"); err == nil || !strings.Contains(err.Error(), "more than zero") {
		t.Errorf("Positive(0) = %v", err)
	}
	if d, err := Positive("1"); err != nil || d != time.Second {
		t.Errorf("Positive(1) = %v, %v", d, err)
	}
}

// The message names the input and shows valid examples, the same for every
// reason, so users learn the grammar from any error.
func TestErrorText(t *testing.T) {
	_, err := Parse("30 sec")
	want := `invalid duration "30 sec" (not a duration): want e.g. ` + Examples
	if err == nil || err.Error() != want {
		t.Errorf("error = %v\nwant    %s", err, want)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"30s", "30", "0.5", "1h2m3s", "-1", "1e308", "NaN", ".5s", "9223372036854775807ns"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := Parse(s)
		if err != nil {
			var de *Error
			if !errors.As(err, &de) || de.Input != s {
				t.Fatalf("Parse(%q): error %v is not an *Error naming the input", s, err)
			}
			return
		}
		if d < 0 || d > Max {
			t.Fatalf("Parse(%q) = %v: out of [0, Max]", s, d)
		}
		// What Go's own syntax prints back must parse to the same value.
		if d2, err := Parse(d.String()); err != nil || d2 != d {
			t.Fatalf("Parse(%q) = %v, but Parse(%q) = %v, %v", s, d, d.String(), d2, err)
		}
	})
}

func TestFlag(t *testing.T) {
	var f Flag
	if err := f.Set("90"); err != nil || time.Duration(f) != 90*time.Second || f.String() != "1m30s" {
		t.Errorf("Set(90) = %v, %v", time.Duration(f), err)
	}
	if err := f.Set("soon"); err == nil || time.Duration(f) != 90*time.Second {
		t.Errorf("Set(soon) = %v and changed the value to %v", err, time.Duration(f))
	}
}
