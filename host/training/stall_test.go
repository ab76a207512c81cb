package training

import (
	"strings"
	"testing"
)

func TestStallWatch(t *testing.T) {
	type step struct {
		uniform bool
		mean    float64
	}
	flat := func(mean float64) step { return step{true, mean} }
	varied := func(mean float64) step { return step{false, mean} }
	tests := []struct {
		name   string
		steps  []step
		warnAt []int // indexes of the steps that warn
		advice string
	}{
		{"never uniform", []step{varied(0), varied(0.5), varied(0.8), varied(0.8)}, nil, ""},
		{"two uniform steps are not a stall", []step{flat(-1), flat(-1), varied(0), flat(-1), flat(-1)}, nil, ""},
		{"never moved: the tasks", []step{flat(-1), flat(-1), flat(-1), flat(-1)}, []int{2}, "never moved"},
		{"collapse: the learning rate", []step{varied(0), varied(0.6), flat(-1), flat(-1), flat(-1)}, []int{4}, "fell from 0.600"},
		{"a new streak warns again", []step{flat(-1), flat(-1), flat(-1), varied(0), flat(-1), flat(-1), flat(-1)}, []int{2, 6}, "learning_rate"},
		{"rose to every completion scoring 1: success, not a stall", []step{varied(0), varied(0.5), flat(1), flat(1), flat(1), flat(1)}, nil, ""},
		{"fell from a uniform best", []step{flat(0), flat(1), varied(0.5), flat(-1), flat(-1), flat(-1)}, []int{5}, "fell from 1.000"},
		{"uniform at a middling reward after a higher one", []step{varied(0.8), flat(0.2), flat(0.2), flat(0.2)}, []int{3}, "collapsed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var w stallWatch
			var got []int
			var last string
			for i, s := range tc.steps {
				if msg := w.observe(s.uniform, s.mean); msg != "" {
					got = append(got, i)
					last = msg
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
			if !strings.Contains(last, tc.advice) {
				t.Errorf("last warning lacks %q: %s", tc.advice, last)
			}
		})
	}
}
