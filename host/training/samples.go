package training

import (
	"fmt"
	"maps"
	"slices"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/trainer/grpo"
)

// ErrNoTokenIDs is returned for a trajectory whose turns carry no sampled
// token ids: the policy server did not return them.
var ErrNoTokenIDs = fmt.Errorf("the policy server returned no token ids (training needs the embedded server, or a server that honours return_token_ids)")

// Batch is one step's trainable groups and what was left out.
type Batch struct {
	Groups [][]grpo.Sample
	// Skipped counts episodes left out, by reason: "error" (the episode
	// failed), "cancelled" (Ctrl-C), "empty" (no sampled tokens).
	Skipped map[string]int
	// SplitTurns counts turns that could not be appended to the sequence
	// before them (the server's prompt did not extend it) and start a
	// sample of their own.
	SplitTurns int
}

// Samples converts trajectories into GRPO groups. Each trajectory becomes
// one sample: its first turn's prompt ids, then per turn the sampled ids
// (trained) and the tokens the server put between turns (tool results,
// feedback, the next generation prompt; not trained). A turn whose prompt
// does not extend the sequence so far (the chat template re-rendered an
// earlier turn differently) starts a new sample with the same reward.
func Samples(trajs []core.Trajectory) (Batch, error) {
	b := Batch{Skipped: map[string]int{}}
	byGroup := map[int][]grpo.Sample{}
	for _, t := range trajs {
		switch {
		case t.FinishReason == core.FinishCancelled:
			b.Skipped["cancelled"]++
			continue
		case t.Error != "":
			b.Skipped["error"]++
			continue
		}
		samples, split, err := trajectorySamples(t)
		if err != nil {
			return Batch{}, fmt.Errorf("group %d episode %d (task %s): %w", t.Group, t.Index, t.TaskID, err)
		}
		if len(samples) == 0 {
			b.Skipped["empty"]++
			continue
		}
		b.SplitTurns += split
		byGroup[t.Group] = append(byGroup[t.Group], samples...)
	}
	for _, g := range slices.Sorted(maps.Keys(byGroup)) {
		b.Groups = append(b.Groups, byGroup[g])
	}
	return b, nil
}

func trajectorySamples(t core.Trajectory) ([]grpo.Sample, int, error) {
	var out []grpo.Sample
	var cur *grpo.Sample
	split := 0
	flush := func() {
		if cur != nil && slices.Contains(cur.Trained, true) {
			out = append(out, *cur)
		}
		cur = nil
	}
	for _, tr := range t.Turns {
		if tr.Error != "" || tr.MessageIndex < 0 {
			continue // the policy call failed: nothing was sampled
		}
		if len(tr.TokenIDs) == 0 {
			if len(tr.PromptTokenIDs) == 0 {
				return nil, 0, ErrNoTokenIDs
			}
			continue // an empty completion: nothing to train
		}
		if len(tr.PromptTokenIDs) == 0 {
			return nil, 0, ErrNoTokenIDs
		}
		if tr.LogProbs != nil && len(tr.LogProbs) != len(tr.TokenIDs) {
			return nil, 0, fmt.Errorf("turn %d has %d token ids but %d logprobs", tr.Index, len(tr.TokenIDs), len(tr.LogProbs))
		}
		if cur != nil && !extends(tr.PromptTokenIDs, cur.Tokens) {
			flush()
			split++
		}
		if cur == nil {
			cur = &grpo.Sample{Reward: t.Reward}
		}
		for _, id := range tr.PromptTokenIDs[len(cur.Tokens):] {
			cur.Tokens = append(cur.Tokens, int32(id))
			cur.Trained = append(cur.Trained, false)
			cur.SampleLogProbs = append(cur.SampleLogProbs, 0)
		}
		for i, id := range tr.TokenIDs {
			cur.Tokens = append(cur.Tokens, int32(id))
			cur.Trained = append(cur.Trained, true)
			lp := float32(0)
			if tr.LogProbs != nil {
				lp = tr.LogProbs[i]
			}
			cur.SampleLogProbs = append(cur.SampleLogProbs, lp)
		}
		cur.Truncated = cur.Truncated || tr.StopReason == "length"
	}
	flush()
	return out, split, nil
}

// extends reports whether prompt starts with seq.
func extends(prompt []int, seq []int32) bool {
	if len(prompt) < len(seq) {
		return false
	}
	for i, id := range seq {
		if prompt[i] != int(id) {
			return false
		}
	}
	return true
}
