package envplugin

import (
	"context"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/core/sdk/pluginbase"
)

// Environment is what an environment plugin implements. One plugin process
// serves one `env` block. Methods must be safe for concurrent use: the host
// runs many episodes at once.
type Environment interface {
	Info() pluginbase.Info
	Configure(ctx context.Context, cfg schema.Config) schema.Diagnostics

	// Tasks lists every task of the configured dataset, in a stable order.
	// The host samples batches from it.
	Tasks(ctx context.Context) ([]core.Task, error)

	// NewEpisode starts an episode on task ep.Task in the sandbox the host
	// lent for it, and returns the first observation (prompt and tools).
	NewEpisode(ctx context.Context, ep Episode) (Session, Observation, error)
}

// Episode is everything an environment gets to start an episode.
type Episode struct {
	ID      string
	Task    core.Task
	Sandbox Sandbox // lent by the host for the episode's lifetime only
	Seed    int64
	Group   int
	Index   int // position in the group
}

// Session is one running episode inside the environment.
type Session interface {
	// Step takes the policy's reply and returns what the policy sees next
	// (tool results, feedback) or Done with the reward.
	Step(ctx context.Context, reply core.Message) (Observation, error)

	// End finishes the episode. reason is "" when Step already returned Done;
	// otherwise the host stopped it (core.FinishMaxTurns, FinishTimeout,
	// FinishContextLimit, FinishCancelled, FinishError) and the env may
	// return a final reward and metrics. End is always called exactly once.
	// After a timeout it can arrive while a Step is still running, so a
	// session must tolerate that (stop its work, and not rely on the lent
	// Sandbox once End has returned).
	End(ctx context.Context, reason string) (Observation, error)
}

// Observation is what an environment returns after starting or stepping.
type Observation struct {
	Messages     []core.Message     // appended to the conversation
	Tools        []core.ToolSpec    // offered to the policy; set on the first observation
	Done         bool               // the episode is over
	Reward       float64            // valid when Done, or from End
	Metrics      map[string]float64 // merged into the trajectory's metrics
	Info         map[string]string  // merged into the trajectory's info
	FinishReason string             // e.g. core.FinishPassed
}

// Sandbox is the lent view of one sandbox. An environment can touch only
// the sandbox it was lent, and never sees backend credentials.
type Sandbox = core.Sandbox
