package eval

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/rlhost/rlhost/core"
)

// trajs makes the episodes of one policy: rewards[g] are task g's.
func trajs(rewards ...[]float64) []core.Trajectory {
	var out []core.Trajectory
	for g, rs := range rewards {
		for i, r := range rs {
			out = append(out, core.Trajectory{Group: g, Index: i, Reward: r, Info: map[string]string{}})
		}
	}
	return out
}

var twoTasks = []core.Task{{ID: "a"}, {ID: "b"}}

func TestSummarize(t *testing.T) {
	res := Summarize("p", "model dir", twoTasks, trajs([]float64{1, 1, 0, 0}, []float64{1, 1, 1, 1}), 2, 0)
	// Task a: mean 0.5, sd sqrt(1/3), so its mean's variance is 1/12; task
	// b has none. The mean's error is sqrt(1/12)/2 at 3 degrees of freedom
	// (all of it from task a's 4 episodes).
	h := 3.182446305284263 * math.Sqrt(1.0/12) / 2
	if res.RewardMean != 0.75 || math.Abs(res.RewardCI[0]-(0.75-h)) > 1e-6 || math.Abs(res.RewardCI[1]-(0.75+h)) > 1e-6 {
		t.Errorf("reward %g %v, want 0.75 ± %g", res.RewardMean, res.RewardCI, h)
	}
	// pass@1 is the share passed; pass@2 of task a is 1 - C(2,2)/C(4,2).
	if res.PassAt1 != 0.75 || math.Abs(res.PassAtK-(1-1.0/6+1)/2) > 1e-12 {
		t.Errorf("pass@1 %g pass@2 %g, want 0.75 and %g", res.PassAt1, res.PassAtK, (1-1.0/6+1)/2)
	}
	if res.Episodes != 8 || res.Tasks[0].Passed != 2 || res.Tasks[1].Passed != 4 {
		t.Errorf("counts: %+v", res)
	}
	var b bytes.Buffer
	res.Render(&b)
	for _, want := range []string{"policy p (model dir): 2 tasks x 4 episodes", "pass@1 75.0%", "pass@2 91.7%", "a       0.500    50.0%    83.3%"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("rendered result lacks %q:\n%s", want, b.String())
		}
	}
}

func TestCompare(t *testing.T) {
	for _, tc := range []struct {
		name        string
		base, other []core.Trajectory
		diff        float64
		significant bool
	}{
		{"all failed against all passed", trajs([]float64{0, 0, 0}, []float64{0, 0, 0}), trajs([]float64{1, 1, 1}, []float64{1, 1, 1}), 1, true},
		{"the same spread", trajs([]float64{1, 0, 1, 0}, []float64{1, 1, 0, 0}), trajs([]float64{0, 1, 1, 0}, []float64{0, 0, 1, 1}), 0, false},
		{"a small edge in few episodes", trajs([]float64{1, 0, 0, 0}, []float64{0, 1, 0, 0}), trajs([]float64{1, 1, 0, 0}, []float64{0, 1, 1, 0}), 0.25, false},
		{"a clear edge", trajs([]float64{0, 0, 0, 0, 0, 0, 1, 0}, []float64{0, 1, 0, 0, 0, 0, 0, 0}),
			trajs([]float64{1, 1, 1, 1, 1, 1, 0, 1}, []float64{1, 1, 1, 1, 0, 1, 1, 1}), 0.75, true},
		{"one task", trajs([]float64{0, 0, 1, 0, 0, 0}), trajs([]float64{1, 1, 1, 0, 1, 1}), 4.0 / 6, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tasks := twoTasks[:tc.base[len(tc.base)-1].Group+1]
			a := Summarize("base", "", tasks, tc.base, 1, 0)
			b := Summarize("other", "", tasks, tc.other, 1, 0)
			c := Compare(a, b)
			if math.Abs(c.Reward.Diff-tc.diff) > 1e-12 || c.Reward.Significant != tc.significant {
				t.Errorf("reward difference %g (p %g, significant %v), want %g and %v", c.Reward.Diff, c.Reward.P, c.Reward.Significant, tc.diff, tc.significant)
			}
			if c.Reward.CI[0] > c.Reward.Diff || c.Reward.CI[1] < c.Reward.Diff {
				t.Errorf("interval %v does not hold the difference %g", c.Reward.CI, c.Reward.Diff)
			}
			if c.Reward.Significant == (c.Reward.CI[0] <= 0 && c.Reward.CI[1] >= 0) && c.Reward.CI[0] != c.Reward.CI[1] {
				t.Errorf("p %g and the interval %v disagree", c.Reward.P, c.Reward.CI)
			}
		})
	}
}
