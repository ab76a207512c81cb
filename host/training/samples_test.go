package training

import (
	"errors"
	"fmt"
	"testing"

	"github.com/rlhost/rlhost/core"
)

func turn(prompt, sampled []int, stop string) core.Turn {
	lps := make([]float32, len(sampled))
	for i := range lps {
		lps[i] = -float32(i+1) / 10
	}
	return core.Turn{MessageIndex: 1, PromptTokenIDs: prompt, TokenIDs: sampled, LogProbs: lps, StopReason: stop}
}

func TestSamplesMergeTurnsAndMaskWhatWasNotSampled(t *testing.T) {
	cases := []struct {
		name        string
		trajs       []core.Trajectory
		wantTokens  [][]int32 // per sample, in group order
		wantTrained []string  // per sample: one char per token, x trained
		wantSplit   int
		wantSkipped map[string]int
		wantTrunc   []bool
	}{
		{
			name: "one turn",
			trajs: []core.Trajectory{{Group: 0, Reward: 1, Turns: []core.Turn{
				turn([]int{1, 2, 3}, []int{4, 5}, "stop")}}},
			wantTokens: [][]int32{{1, 2, 3, 4, 5}}, wantTrained: []string{"...xx"}, wantTrunc: []bool{false},
		},
		{
			name: "two turns merge with the tool result between them untrained",
			trajs: []core.Trajectory{{Group: 0, Reward: 0.5, Turns: []core.Turn{
				turn([]int{1, 2}, []int{3, 4}, "tool_calls"),
				turn([]int{1, 2, 3, 4, 9, 9, 8}, []int{5}, "length")}}},
			wantTokens: [][]int32{{1, 2, 3, 4, 9, 9, 8, 5}}, wantTrained: []string{"..xx...x"}, wantTrunc: []bool{true},
		},
		{
			name: "a prompt that does not extend the sequence starts a new sample",
			trajs: []core.Trajectory{{Group: 0, Reward: 1, Turns: []core.Turn{
				turn([]int{1, 2}, []int{3, 4}, "stop"),
				turn([]int{1, 2, 7, 4, 9}, []int{5}, "stop")}}},
			wantTokens: [][]int32{{1, 2, 3, 4}, {1, 2, 7, 4, 9, 5}}, wantTrained: []string{"..xx", ".....x"}, wantSplit: 1,
			wantTrunc: []bool{false, false},
		},
		{
			name: "failed and cancelled episodes are left out and counted",
			trajs: []core.Trajectory{
				{Group: 0, Reward: 1, Turns: []core.Turn{turn([]int{1}, []int{2}, "stop")}},
				{Group: 0, Error: "sandbox died", Turns: []core.Turn{turn([]int{1}, []int{3}, "stop")}},
				{Group: 1, FinishReason: core.FinishCancelled, Error: "context canceled"},
				{Group: 1, Reward: 0, Turns: []core.Turn{{MessageIndex: 1, PromptTokenIDs: []int{1}}}},
			},
			wantTokens: [][]int32{{1, 2}}, wantTrained: []string{".x"}, wantTrunc: []bool{false},
			wantSkipped: map[string]int{"error": 1, "cancelled": 1, "empty": 1},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := Samples(c.trajs)
			if err != nil {
				t.Fatal(err)
			}
			i := 0
			for _, g := range b.Groups {
				for _, s := range g {
					if i >= len(c.wantTokens) {
						t.Fatalf("more samples than expected: %+v", b.Groups)
					}
					if fmt.Sprint(s.Tokens) != fmt.Sprint(c.wantTokens[i]) {
						t.Errorf("sample %d tokens %v, want %v", i, s.Tokens, c.wantTokens[i])
					}
					mask := ""
					for _, tr := range s.Trained {
						mask += map[bool]string{true: "x", false: "."}[tr]
					}
					if mask != c.wantTrained[i] {
						t.Errorf("sample %d trained %s, want %s", i, mask, c.wantTrained[i])
					}
					if s.Truncated != c.wantTrunc[i] {
						t.Errorf("sample %d truncated %v", i, s.Truncated)
					}
					for k, tr := range s.Trained {
						if tr && s.SampleLogProbs[k] == 0 {
							t.Errorf("sample %d token %d lost its sampling log-prob", i, k)
						}
					}
					i++
				}
			}
			if i != len(c.wantTokens) {
				t.Errorf("%d samples, want %d", i, len(c.wantTokens))
			}
			if b.SplitTurns != c.wantSplit {
				t.Errorf("split turns %d, want %d", b.SplitTurns, c.wantSplit)
			}
			for k, v := range c.wantSkipped {
				if b.Skipped[k] != v {
					t.Errorf("skipped %s = %d, want %d (%v)", k, b.Skipped[k], v, b.Skipped)
				}
			}
		})
	}
}

func TestSamplesRefuseTextWithoutTokenIDs(t *testing.T) {
	_, err := Samples([]core.Trajectory{{Turns: []core.Turn{{MessageIndex: 1}}}})
	if !errors.Is(err, ErrNoTokenIDs) {
		t.Errorf("error %v, want ErrNoTokenIDs", err)
	}
	_, err = Samples([]core.Trajectory{{Turns: []core.Turn{{MessageIndex: 1, PromptTokenIDs: []int{1}, TokenIDs: []int{2, 3}, LogProbs: []float32{-1}}}}})
	if err == nil {
		t.Error("mismatched token ids and logprobs accepted")
	}
}
