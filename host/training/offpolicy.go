package training

import (
	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/host/output"
)

// Off-policy training (run.max_off_policy_steps > 0): rollouts run ahead of
// the trainer, so a step's episodes may have been sampled by weights a few
// updates older than the ones being trained. Every turn records the
// version of the weights that sampled it (the number of GRPO updates
// applied to them); an episode's age is the trainer's version minus its
// oldest turn's. The runner never starts a step more than
// max_off_policy_steps steps ahead, so no episode is older than that in
// updates either; one that is (a run resumed with a smaller setting) is
// dropped here, counted, and not trained. The importance-sampling
// correction of the loss (sampling_correction) then weighs each kept token
// by how far the trainer's probability has moved from the sampler's.

// StaleStats describe the ages of one step's episodes.
type StaleStats struct {
	// Ages counts the episodes kept by their age in updates; episodes
	// whose turns carry no version are not counted.
	Ages map[int]int
	// Dropped counts episodes older than the limit, left out of training.
	Dropped int
}

// Mean is the mean age of the episodes counted.
func (s StaleStats) Mean() float64 {
	n, sum := 0, 0
	for age, c := range s.Ages {
		n += c
		sum += age * c
	}
	if n == 0 {
		return 0
	}
	return float64(sum) / float64(n)
}

// Max is the largest age counted.
func (s StaleStats) Max() int {
	m := 0
	for age := range s.Ages {
		m = max(m, age)
	}
	return m
}

// figures are the ages as a step's metrics record them.
func (s StaleStats) figures() output.Ages {
	a := output.Ages{Mean: s.Mean(), Max: float64(s.Max()), Dropped: float64(s.Dropped), Count: map[int]float64{}}
	for age, n := range s.Ages {
		a.Count[age] = float64(n)
	}
	return a
}

// age is how many updates separate version now from the oldest weights
// that sampled one of t's turns; false when no turn says.
func age(t core.Trajectory, now int) (int, bool) {
	oldest, known := 0, false
	for _, tr := range t.Turns {
		if tr.WeightsVersion == nil || len(tr.TokenIDs) == 0 {
			continue
		}
		if !known || *tr.WeightsVersion < oldest {
			oldest, known = *tr.WeightsVersion, true
		}
	}
	return now - oldest, known
}

// dropStale keeps the episodes sampled at most limit updates before
// version now, and counts the ages of those it keeps and the ones it
// drops. Failed and cancelled episodes pass through uncounted: Samples
// leaves them out anyway.
func dropStale(trajs []core.Trajectory, now, limit int) ([]core.Trajectory, StaleStats) {
	st := StaleStats{Ages: map[int]int{}}
	out := make([]core.Trajectory, 0, len(trajs))
	for _, t := range trajs {
		a, ok := age(t, now)
		switch {
		case !ok || t.Error != "" || t.FinishReason == core.FinishCancelled:
		case a > limit:
			st.Dropped++
			continue
		default:
			st.Ages[a]++
		}
		out = append(out, t)
	}
	return out, st
}
