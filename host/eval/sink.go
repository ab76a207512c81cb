package eval

import (
	"context"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/host/runner"
)

// Sink evaluates a training run's policy on the held-out tasks every
// Settings.Every steps, after the step's update (TRL's eval_steps), and
// adds the eval/* metrics to that step's metrics line. It goes after the
// training sink in the runner's sinks.
type Sink struct {
	Runner   *runner.Runner // the run's own: its env, sandboxes and policy
	Settings *Settings
	Tasks    []core.Task // the held-out tasks
}

var _ runner.StepSink = (*Sink)(nil)

// EndStep evaluates when the step is due. An interrupted step is not
// evaluated, and neither is one whose evaluation Ctrl-C cut short.
func (s *Sink) EndStep(ctx context.Context, st *runner.Step) error {
	every := s.Settings.Every
	if st.Interrupted || every <= 0 || len(s.Tasks) == 0 || (st.Index+1)%every != 0 {
		return nil
	}
	start := time.Now()
	trajs := s.Runner.Episodes(ctx, st.Index, s.Tasks, s.Settings.Samples)
	if ctx.Err() != nil {
		return nil
	}
	res := Summarize("policy", "", s.Tasks, trajs, s.Settings.K, time.Since(start))
	res.Figures().Put(st.Metrics.Extra)
	return nil
}
