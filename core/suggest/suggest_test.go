package suggest

import "testing"

func TestClosest(t *testing.T) {
	names := []string{"steps", "batch_size", "group_size", "seed", "dry-run", "out"}
	for _, tc := range []struct{ in, want string }{
		{"stesp", "steps"},
		{"stpes", "steps"},
		{"step", "steps"},
		{"batchsize", "batch_size"},
		{"dryrun", "dry-run"},
		{"bogus", ""},
		{"x", ""},
		{"steps", "steps"},
	} {
		if got := Closest(tc.in, names); got != tc.want {
			t.Errorf("Closest(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"a", "", 1}, {"", "abc", 3}, {"abc", "abc", 0},
		{"ab", "ba", 1}, {"kitten", "sitting", 3}, {"stpes", "steps", 1},
	} {
		if got := distance(tc.a, tc.b); got != tc.want {
			t.Errorf("distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func FuzzDistance(f *testing.F) {
	f.Add("stpes", "steps")
	f.Fuzz(func(t *testing.T, a, b string) {
		d := distance(a, b)
		if d != distance(b, a) {
			t.Fatalf("not symmetric for %q, %q", a, b)
		}
		if (d == 0) != (string([]rune(a)) == string([]rune(b))) {
			t.Fatalf("distance(%q, %q) = %d", a, b, d)
		}
	})
}
