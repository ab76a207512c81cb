package output

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
)

func TestAggregate(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	tr := func(reward float64, mut func(*core.Trajectory)) core.Trajectory {
		t := core.Trajectory{Reward: reward, FinishReason: core.FinishDone}
		if mut != nil {
			mut(&t)
		}
		return t
	}
	tests := []struct {
		name  string
		trajs []core.Trajectory
		want  core.StepMetrics
		extra map[string]float64 // subset of Extra to check
	}{
		{
			name: "empty step",
			want: core.StepMetrics{RunID: "r", Step: 3},
		},
		{
			name:  "binary rewards",
			trajs: []core.Trajectory{tr(1, nil), tr(0, nil), tr(1, nil), tr(0, nil)},
			want: core.StepMetrics{RunID: "r", Step: 3, Episodes: 4, RewardMean: 0.5, RewardStd: 0.5,
				RewardMin: 0, RewardMax: 1, PassRate: 0.5},
			extra: map[string]float64{"finish/done": 4},
		},
		{
			name: "shaped rewards pass by metric, population std",
			trajs: []core.Trajectory{
				tr(0.8, func(t *core.Trajectory) { t.Metrics = map[string]float64{"passed": 1, "tests": 4} }),
				tr(0.2, func(t *core.Trajectory) { t.Metrics = map[string]float64{"passed": 0, "tests": 2} }),
				tr(-1, func(t *core.Trajectory) { t.Metrics = map[string]float64{"passed": 0.5} }),
			},
			want: core.StepMetrics{RunID: "r", Step: 3, Episodes: 3, RewardMean: 0,
				RewardStd: math.Sqrt((0.64 + 0.04 + 1) / 3), RewardMin: -1, RewardMax: 0.8, PassRate: 1.0 / 3},
			// A metric an episode does not report counts as 0 in the mean.
			extra: map[string]float64{"metric/tests": 2, "metric/passed": 0.5},
		},
		{
			name: "a metric set only on success averages to the pass rate",
			trajs: []core.Trajectory{
				tr(1, func(t *core.Trajectory) { t.Metrics = map[string]float64{"passed": 1} }),
				tr(1, func(t *core.Trajectory) { t.Metrics = map[string]float64{"passed": 1} }),
				tr(0, func(t *core.Trajectory) { t.Metrics = map[string]float64{"score": math.NaN()} }),
			},
			want: core.StepMetrics{RunID: "r", Step: 3, Episodes: 3, RewardMean: 2.0 / 3,
				RewardStd: math.Sqrt(2.0 / 9), RewardMin: 0, RewardMax: 1, PassRate: 2.0 / 3},
			extra: map[string]float64{"metric/passed": 2.0 / 3, "metric/score": 0},
		},
		{
			name: "errors and timeouts",
			trajs: []core.Trajectory{
				tr(0, func(t *core.Trajectory) { t.Error = "sandbox died"; t.FinishReason = core.FinishError }),
				tr(0, func(t *core.Trajectory) { t.FinishReason = core.FinishTimeout }),
				tr(0, func(t *core.Trajectory) { t.Metrics = map[string]float64{"timeouts": 2} }),
				tr(1.5, nil),
			},
			want: core.StepMetrics{RunID: "r", Step: 3, Episodes: 4, RewardMean: 0.375,
				RewardStd: math.Sqrt((3*0.375*0.375 + 1.125*1.125) / 4), RewardMin: 0, RewardMax: 1.5,
				PassRate: 0.25, Errors: 1, Timeouts: 2},
			extra: map[string]float64{"finish/error": 1, "finish/timeout": 1, "finish/done": 2},
		},
		{
			name:  "non-finite rewards are skipped in stats but counted",
			trajs: []core.Trajectory{tr(math.NaN(), nil), tr(2, nil), tr(math.Inf(1), nil)},
			want: core.StepMetrics{RunID: "r", Step: 3, Episodes: 3, RewardMean: 2, RewardMin: 2,
				RewardMax: 2, PassRate: 2.0 / 3},
			extra: map[string]float64{ExtraNonFinite: 2},
		},
		{
			name: "turns, usage and wall-clock span",
			trajs: []core.Trajectory{
				tr(0, func(t *core.Trajectory) {
					t.StartedAt, t.DurationMS = t0, 1000
					t.Turns = []core.Turn{
						{Usage: core.Usage{PromptTokens: 10, CompletionTokens: 5}, ToolCalls: 2},
						{Usage: core.Usage{PromptTokens: 20, CompletionTokens: 1}, Empty: true},
					}
				}),
				tr(0, func(t *core.Trajectory) {
					t.StartedAt, t.DurationMS = t0.Add(500*time.Millisecond), 2500
					t.Turns = []core.Turn{{Usage: core.Usage{PromptTokens: 7, CompletionTokens: 3}, ToolCalls: 1}}
				}),
			},
			want: core.StepMetrics{RunID: "r", Step: 3, Episodes: 2, DurationMS: 3000},
			extra: map[string]float64{ExtraTurnsMean: 1.5, ExtraToolCalls: 3, ExtraEmptyTurns: 1,
				ExtraPromptTokens: 37, ExtraCompletionTokens: 9, ExtraEpisodeMSMean: 1750},
		},
	}
	const eps = 1e-12
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Aggregate("r", 3, tc.trajs)
			extra := got.Extra
			got.Extra = nil
			g, w := got, tc.want
			near := func(a, b float64) bool { return math.Abs(a-b) < eps }
			if g.RunID != w.RunID || g.Step != w.Step || g.Episodes != w.Episodes || g.Errors != w.Errors ||
				g.Timeouts != w.Timeouts || !near(g.RewardMean, w.RewardMean) || !near(g.RewardStd, w.RewardStd) ||
				!near(g.RewardMin, w.RewardMin) || !near(g.RewardMax, w.RewardMax) ||
				!near(g.PassRate, w.PassRate) || !near(g.DurationMS, w.DurationMS) {
				t.Fatalf("got  %+v\nwant %+v", g, w)
			}
			for k, v := range tc.extra {
				if !near(extra[k], v) {
					t.Errorf("Extra[%q] = %v, want %v (all: %v)", k, extra[k], v, extra)
				}
			}
		})
	}
}

func TestProgressAndFinalSummary(t *testing.T) {
	// The step number is the one on disk; the count says how far the run is.
	m := core.StepMetrics{Step: 2, Episodes: 64, RewardMean: 0.4123, RewardStd: 0.21, RewardMax: 1,
		PassRate: 0.375, Timeouts: 1, DurationMS: 12345}
	line := ProgressLine(m, 10)
	for _, want := range []string{"step 2 (3/10)", "episodes 64", "reward 0.412 ± 0.210 [0.000, 1.000]", "pass 37.5%", "timeouts 1", "12.3s"} {
		if !strings.Contains(line, want) {
			t.Errorf("progress line %q lacks %q", line, want)
		}
	}
	if strings.Contains(line, "\n") {
		t.Errorf("progress line has a newline: %q", line)
	}

	s := Summary{RunID: "r9", ConfigPath: "run.hcl", TotalSteps: 20, Interrupted: true,
		StartedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), OutputDir: "runs/r9"}
	s.EndedAt = s.StartedAt.Add(90 * time.Second)
	for i := range 15 {
		s.AddStep(core.StepMetrics{Episodes: 2, RewardMean: float64(i) / 10, PassRate: 0.5, Errors: 1})
	}
	out := FinalSummary(s)
	for _, want := range []string{"run r9 interrupted (config run.hcl)", "steps     15/20", "episodes  30 (errors 15, timeouts 0)",
		"reward    0.700 mean, pass rate 50.0%", "0.000 0.100", "(3 more)", "1.400", "1m30s", "output    runs/r9\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("final summary lacks %q:\n%s", want, out)
		}
	}
}
