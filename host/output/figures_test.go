package output

import (
	"reflect"
	"testing"
)

// Every group of figures reads back what it put, and a step without the
// group says so.
func TestFiguresRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		put  func(map[string]float64)
		back func(map[string]float64) (any, bool)
		want any
	}{
		{"rollout", RolloutTimes{3, 2, 1}.Put,
			func(e map[string]float64) (any, bool) { return RolloutTimesOf(e) }, RolloutTimes{3, 2, 1}},
		{"batch", Batch{Groups: 4, ZeroStdGroups: 1, SplitTurns: 2, Skipped: map[string]float64{"error": 3}}.Put,
			func(e map[string]float64) (any, bool) { return BatchOf(e) },
			Batch{Groups: 4, ZeroStdGroups: 1, SplitTurns: 2, Skipped: map[string]float64{"error": 3}}},
		{"update with ratios", Update{Loss: 0.5, LR: 1e-3, Tokens: 9, SampleRatioMax: 1.5, Seconds: 0.2}.WithRatio().Put,
			func(e map[string]float64) (any, bool) { return UpdateOf(e) },
			Update{Loss: 0.5, LR: 1e-3, Tokens: 9, SampleRatioMax: 1.5, Seconds: 0.2}.WithRatio()},
		{"update", Update{Loss: 0.5}.Put,
			func(e map[string]float64) (any, bool) { return UpdateOf(e) }, Update{Loss: 0.5}},
		{"sync", Sync{WeightsVersion: 3, Seconds: 0.1}.Put,
			func(e map[string]float64) (any, bool) { return SyncOf(e) }, Sync{WeightsVersion: 3, Seconds: 0.1}},
		{"retokenized", Retokenized{Turns: 5, Mismatched: 1}.Put,
			func(e map[string]float64) (any, bool) { return RetokenizedOf(e) }, Retokenized{Turns: 5, Mismatched: 1}},
		{"ages", Ages{Mean: 0.5, Max: 1, Dropped: 2, Count: map[int]float64{0: 4, 1: 4}}.Put,
			func(e map[string]float64) (any, bool) { return AgesOf(e) }, Ages{Mean: 0.5, Max: 1, Dropped: 2, Count: map[int]float64{0: 4, 1: 4}}},
		{"evaluation", Evaluation{RewardMean: 0.7, K: 4, Tasks: 2, Seconds: 3}.Put,
			func(e map[string]float64) (any, bool) { return EvaluationOf(e) }, Evaluation{RewardMean: 0.7, K: 4, Tasks: 2, Seconds: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			extra := map[string]float64{}
			tc.put(extra)
			got, ok := tc.back(extra)
			if !ok || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("read back %+v (present %v), want %+v", got, ok, tc.want)
			}
			if _, ok := tc.back(map[string]float64{"metric/passed": 1}); ok {
				t.Error("a step without the group reads as having it")
			}
		})
	}
	extra := map[string]float64{}
	SkipUpdate(extra)
	if !UpdateSkipped(extra) || UpdateSkipped(map[string]float64{}) {
		t.Error("SkipUpdate does not read back")
	}
	if b, _ := BatchOf(extra); len(b.Skipped) != 0 {
		t.Errorf("the skipped update reads as a skip reason: %v", b.Skipped)
	}
}
