package runner

import (
	"context"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/sdk/envplugin"
	"github.com/rlhost/rlhost/host/output"
)

// Env is what the runner needs of an environment. pluginmgr's LiveEnv
// provides it over a plugin process (and reports a crashed process through
// its errors); tests provide it in process.
type Env interface {
	Tasks(ctx context.Context) ([]core.Task, error)
	NewEpisode(ctx context.Context, ep envplugin.Episode) (envplugin.Session, envplugin.Observation, error)
}

// Backend is what the runner needs of a sandbox backend: create and
// destroy, and the calls on one sandbox that a lent sandbox makes.
type Backend interface {
	Create(ctx context.Context, spec core.SandboxSpec) (core.SandboxInfo, error)
	Destroy(ctx context.Context, id string) error
	core.SandboxOps
}

// Recorder stores what a run produces; *output.Writer is the one on disk.
type Recorder interface {
	WriteTrajectory(t core.Trajectory) error
	WriteStep(m core.StepMetrics) error
	WriteSummary(s output.Summary) error
}

// Step is one finished step as the sinks see it.
type Step struct {
	Index        int
	Trajectories []core.Trajectory // every episode that ran, cancelled ones included
	// Metrics is the step's aggregate; sinks may add to Metrics.Extra and
	// the line written to metrics.jsonl carries what they added.
	Metrics     *core.StepMetrics
	Interrupted bool          // Ctrl-C hit during the step: it is incomplete
	Rollout     time.Duration // wall clock of the episodes (generation and scoring)
	Started     time.Time     // when its first episode was launched
}

// StepSink consumes each step after its episodes end and before its
// metrics line is written. The GRPO trainer is one: it turns the step's
// groups into a weight update. An error stops the run.
type StepSink interface {
	EndStep(ctx context.Context, s *Step) error
}

// Observer hears when steps and episodes start, for live progress (the
// finished side comes through the Recorder's trajectories).
type Observer interface {
	StepStarted(step int)
	EpisodeStarted()
}

// Settings are the run block's values, free of config types.
type Settings struct {
	Steps          int
	BatchSize      int // tasks per step
	GroupSize      int // episodes per task
	Seed           int64
	Concurrency    int
	MaxTurns       int
	EpisodeTimeout time.Duration
	// StartStep skips the steps a resumed run already did; the task order
	// is replayed so step k sees the same tasks as in an uninterrupted run.
	StartStep int
	// MaxOffPolicySteps is how many steps the rollouts may run ahead of
	// the sinks: step s starts once the sinks are done with step
	// s-1-MaxOffPolicySteps. With a trainer among the sinks it bounds how
	// many updates old the weights that sampled a trained token may be.
	// 0 runs step after step: roll out, then train, then roll out again.
	MaxOffPolicySteps int
	// MaxPolicyFailures stops the run after this many consecutive failed
	// policy requests (0: DefaultMaxPolicyFailures), so a dead server costs
	// a few seconds rather than every remaining episode.
	MaxPolicyFailures int
}

// DefaultMaxPolicyFailures is Settings.MaxPolicyFailures' default.
const DefaultMaxPolicyFailures = 8
