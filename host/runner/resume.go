package runner

import (
	"slices"

	"github.com/rlhost/rlhost/host/output"
)

// continueSummary is the summary Run starts from: s itself, or for a
// resumed run (Earlier set) the earlier steps' totals and first start,
// with this start's identity and settings and s's start as ResumedAt.
func (r *Runner) continueSummary(s output.Summary) output.Summary {
	if r.Earlier == nil {
		return s
	}
	e := *r.Earlier
	e.RunID, e.ConfigPath, e.TotalSteps, e.Recovered = s.RunID, s.ConfigPath, s.TotalSteps, s.Recovered
	e.StepRewardMeans = slices.Clone(e.StepRewardMeans)
	e.ResumedAt, e.EndedAt, e.Interrupted = s.StartedAt, s.EndedAt, false
	return e
}
