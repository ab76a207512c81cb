package dashboard

import (
	"testing"

	"github.com/rlhost/rlhost/core"
)

// With rollouts ahead of training, episodes of two steps run at once: the
// count in flight covers both, and the step shown is the oldest running.
func TestLiveCountsStepsRunningAhead(t *testing.T) {
	var l Live
	l.StepStarted(0)
	for range 4 {
		l.EpisodeStarted()
	}
	l.StepStarted(1)
	l.EpisodeStarted()
	l.EpisodeStarted()
	l.EpisodeFinished(core.Trajectory{Step: 1, Error: "boom"})
	for range 3 {
		l.EpisodeFinished(core.Trajectory{Step: 0})
	}
	if c := l.counts(); c.step != 0 || c.finished != 3 || c.inFlight != 2 {
		t.Fatalf("two steps running: %+v, want step 0 with 3 done and 2 in flight", c)
	}
	l.EpisodeFinished(core.Trajectory{Step: 0})
	if c := l.counts(); c.step != 1 || c.finished != 1 || c.failed != 1 || c.inFlight != 1 {
		t.Fatalf("step 0 done: %+v, want step 1 with 1 done (1 failed) and 1 in flight", c)
	}
	// Episodes of a step never announced (resumed ones) are not counted.
	l.EpisodeFinished(core.Trajectory{Step: 7})
	if c := l.counts(); c.inFlight != 1 {
		t.Fatalf("after an unannounced episode: %+v", c)
	}
}
