package training

import (
	"strings"
	"testing"
)

func TestStallWatch(t *testing.T) {
	tests := []struct {
		name   string
		flats  []bool
		warnAt []int // indexes of the steps that warn
	}{
		{"never flat", []bool{false, false, false, false}, nil},
		{"two flat steps are not a stall", []bool{true, true, false, true, true}, nil},
		{"warns once at the third", []bool{true, true, true, true, true}, []int{2}},
		{"a new streak warns again", []bool{true, true, true, false, true, true, true}, []int{2, 6}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var w stallWatch
			var got []int
			for i, flat := range tc.flats {
				if msg := w.observe(flat, -1); msg != "" {
					got = append(got, i)
					if !strings.Contains(msg, "mean reward -1.000") || !strings.Contains(msg, "learning_rate") {
						t.Errorf("warning lacks the reward or the advice: %s", msg)
					}
				}
			}
			if len(got) != len(tc.warnAt) {
				t.Fatalf("warned at %v, want %v", got, tc.warnAt)
			}
			for i := range got {
				if got[i] != tc.warnAt[i] {
					t.Fatalf("warned at %v, want %v", got, tc.warnAt)
				}
			}
		})
	}
}
