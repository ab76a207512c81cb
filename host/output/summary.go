package output

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rlhost/rlhost/core"
)

// Summary is summary.json: the run at a glance, rewritten after every step
// and once more at the end.
type Summary struct {
	RunID           string    `json:"run_id"`
	ConfigPath      string    `json:"config_path,omitempty"`
	TotalSteps      int       `json:"total_steps"`
	StepsDone       int       `json:"steps_done"`
	Episodes        int       `json:"episodes"`
	Errors          int       `json:"errors"`
	Timeouts        int       `json:"timeouts"`
	RewardMean      float64   `json:"reward_mean"` // over all episodes, weighted by episode
	PassRate        float64   `json:"pass_rate"`   // over all episodes
	StartedAt       time.Time `json:"started_at"`
	ResumedAt       time.Time `json:"resumed_at,omitzero"` // the latest --resume; zero for a run never resumed
	EndedAt         time.Time `json:"ended_at,omitzero"`   // zero while running
	Interrupted     bool      `json:"interrupted"`
	StepRewardMeans []float64 `json:"step_reward_means"`
	// OutputDir is where the run's files are; Writer.WriteSummary fills it.
	OutputDir string `json:"output_dir,omitempty"`
	// Recovered lists torn lines cut off when the output files were reopened.
	Recovered []string `json:"recovered,omitempty"`
}

// AddStep folds one step's metrics into the totals.
func (s *Summary) AddStep(m core.StepMetrics) {
	total := s.Episodes + m.Episodes
	if total > 0 {
		prev, cur := float64(s.Episodes), float64(m.Episodes)
		s.RewardMean = (s.RewardMean*prev + m.RewardMean*cur) / float64(total)
		s.PassRate = (s.PassRate*prev + m.PassRate*cur) / float64(total)
	}
	s.Episodes = total
	s.Errors += m.Errors
	s.Timeouts += m.Timeouts
	s.StepsDone++
	s.StepRewardMeans = append(s.StepRewardMeans, m.RewardMean)
}

// Continued is the summary a resumed run goes on from: the run's first
// start (from prev, the summary.json the earlier part left; now when it
// has none) and the totals of earlier, the steps the resume kept. The
// resumed run's Runner adds its own steps to it, so the final summary and
// summary.json describe the whole run.
func Continued(prev Summary, earlier []core.StepMetrics, now time.Time) Summary {
	s := Summary{StartedAt: prev.StartedAt}
	if s.StartedAt.IsZero() {
		s.StartedAt = now
	}
	for _, m := range earlier {
		s.AddStep(m)
	}
	return s
}

// ProgressLine renders one step for the terminal, e.g.
//
//	step 2 (3/10)  episodes 64  reward 0.412 ± 0.210 [0.000, 1.000]  pass 37.5%  errors 0  timeouts 1  12.3s
//
// The step number is m.Step, the same 0-based number as in metrics.jsonl
// and trajectories.jsonl; the count in brackets says how far the run is.
// totalSteps <= 0 means unknown and prints the step alone.
func ProgressLine(m core.StepMetrics, totalSteps int) string {
	var b strings.Builder
	b.WriteString(stepLabel(m.Step, totalSteps))
	fmt.Fprintf(&b, "  episodes %d  reward %.3f ± %.3f [%.3f, %.3f]  pass %.1f%%  errors %d  timeouts %d  %s",
		m.Episodes, m.RewardMean, m.RewardStd, m.RewardMin, m.RewardMax,
		100*m.PassRate, m.Errors, m.Timeouts, fmtMS(m.DurationMS))
	u, trained := UpdateOf(m.Extra)
	batch, _ := BatchOf(m.Extra)
	if !trained && UpdateSkipped(m.Extra) {
		b.WriteString("\n  train: no update (no group's rewards differ, or nothing to train on)")
	} else if trained {
		// A training step: the update's figures on a line of their own.
		fmt.Fprintf(&b, "\n  train: loss %.4f  grad %.3f  lr %.2g  clip %.1f%%  tokens %.0f  zero-std groups %.0f/%.0f  %.1fs",
			u.Loss, u.GradNorm, u.LR, 100*u.ClipRegion, u.Tokens, batch.ZeroStdGroups, batch.Groups, u.Seconds)
	}
	if ev, ok := EvaluationOf(m.Extra); ok && ev.Tasks > 0 {
		// The held-out tasks, evaluated after this step's update.
		fmt.Fprintf(&b, "\n  eval: reward %.3f [%.3f, %.3f]  pass@1 %.1f%%  pass@%.0f %.1f%%  tasks %.0f  errors %.0f  %.1fs",
			ev.RewardMean, ev.RewardLow, ev.RewardHigh, 100*ev.PassAt1, ev.K, 100*ev.PassAtK, ev.Tasks, ev.Errors, ev.Seconds)
	}
	if sync, ok := SyncOf(m.Extra); ok {
		// Training a policy another server samples (weights_sync): how
		// far its log-probs are from the trainer's, and the adapter pushed.
		fmt.Fprintf(&b, "\n  sync: ratio %.3f (max %.2f, clipped %.1f%%)  weights version %.0f loaded  %.1fs",
			u.SampleRatioMean, u.SampleRatioMax, 100*u.SampleRatioClipped, sync.WeightsVersion, sync.Seconds)
		if r, ok := RetokenizedOf(m.Extra); ok && r.Turns > 0 {
			fmt.Fprintf(&b, "  retokenised %.0f turns (%.0f mismatched)", r.Turns, r.Mismatched)
		}
	}
	if a, ok := AgesOf(m.Extra); ok && (a.Max > 0 || a.Dropped > 0) {
		// Rollouts ahead of training: how old the trained episodes were.
		fmt.Fprintf(&b, "\n  off-policy: episodes %.2f updates old on average (at most %.0f), %.0f dropped as too old", a.Mean, a.Max, a.Dropped)
	}
	return b.String()
}

// stepLabel is "step 2 (3/10)": the on-disk step number and the count.
func stepLabel(step, totalSteps int) string {
	if totalSteps > 0 {
		w := len(fmt.Sprint(totalSteps - 1))
		return fmt.Sprintf("step %*d (%d/%d)", w, step, step+1, totalSteps)
	}
	return fmt.Sprintf("step %d", step)
}

// FinalSummary renders the summary as a few lines for the end of a run.
func FinalSummary(s Summary) string {
	var b strings.Builder
	status := "finished"
	if s.Interrupted {
		status = "interrupted"
	}
	fmt.Fprintf(&b, "run %s %s", s.RunID, status)
	if s.ConfigPath != "" {
		fmt.Fprintf(&b, " (config %s)", s.ConfigPath)
	}
	b.WriteByte('\n')
	if s.TotalSteps > 0 {
		fmt.Fprintf(&b, "  steps     %d/%d\n", s.StepsDone, s.TotalSteps)
	} else {
		fmt.Fprintf(&b, "  steps     %d\n", s.StepsDone)
	}
	fmt.Fprintf(&b, "  episodes  %d (errors %d, timeouts %d)\n", s.Episodes, s.Errors, s.Timeouts)
	fmt.Fprintf(&b, "  reward    %.3f mean, pass rate %.1f%%\n", s.RewardMean, 100*s.PassRate)
	if n := len(s.StepRewardMeans); n > 0 {
		fmt.Fprintf(&b, "  by step   %s\n", fmtSeries(s.StepRewardMeans))
	}
	if !s.StartedAt.IsZero() && !s.EndedAt.IsZero() {
		resumed := ""
		if !s.ResumedAt.IsZero() {
			resumed = ", resumed at " + s.ResumedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(&b, "  time      %s (%s to %s%s)\n", s.EndedAt.Sub(s.StartedAt).Round(time.Millisecond),
			s.StartedAt.UTC().Format(time.RFC3339), s.EndedAt.UTC().Format(time.RFC3339), resumed)
	}
	if s.OutputDir != "" {
		fmt.Fprintf(&b, "  output    %s\n", s.OutputDir)
	}
	for _, r := range s.Recovered {
		fmt.Fprintf(&b, "  recovered %s\n", r)
	}
	return b.String()
}

// fmtSeries prints per-step means, eliding the middle of long runs so the
// line stays readable.
func fmtSeries(v []float64) string {
	const keep = 6
	parts := make([]string, 0, 2*keep+1)
	for i, x := range v {
		if len(v) > 2*keep && i == keep {
			parts = append(parts, fmt.Sprintf("… (%d more) …", len(v)-2*keep))
		}
		if len(v) > 2*keep && i >= keep && i < len(v)-keep {
			continue
		}
		parts = append(parts, fmt.Sprintf("%.3f", x))
	}
	return strings.Join(parts, " ")
}

func fmtMS(ms float64) string {
	return time.Duration(ms * float64(time.Millisecond)).Round(100 * time.Millisecond).String()
}

// ReadSummary reads the summary.json of the run in dir.
func ReadSummary(dir string) (Summary, error) {
	var s Summary
	data, err := os.ReadFile(filepath.Join(dir, SummaryFile))
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return s, fmt.Errorf("%s: %w", filepath.Join(dir, SummaryFile), err)
	}
	return s, nil
}
