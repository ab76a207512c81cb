package dashboard

import (
	"sync"

	"github.com/rlhost/rlhost/core"
)

// Live counts the episodes of the run this process runs, as the runner
// starts and ends them, so the page shows episodes in flight exactly
// rather than estimated from the files. Its methods have the shapes of
// runner.Observer and output.Writer.OnTrajectory's callback, and are safe
// for concurrent use.
type Live struct {
	mu       sync.Mutex
	version  uint64
	step     int
	started  int // this step
	finished int // this step
	failed   int // this step
	ended    bool
}

// StepStarted resets the counts for step.
func (l *Live) StepStarted(step int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.step, l.started, l.finished, l.failed = step, 0, 0, 0
	l.version++
}

// EpisodeStarted counts an episode that began.
func (l *Live) EpisodeStarted() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.started++
	l.version++
}

// EpisodeFinished counts an episode that ended.
func (l *Live) EpisodeFinished(t core.Trajectory) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t.Step != l.step {
		return // a step that StepStarted has not announced; ignore
	}
	l.finished++
	if t.Error != "" {
		l.failed++
	}
	l.version++
}

// End marks the run as over: nothing is in flight any more.
func (l *Live) End() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ended = true
	l.version++
}

// Version changes with every count.
func (l *Live) Version() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.version
}

type liveCounts struct {
	step, started, finished, failed int
	ended                           bool
}

func (l *Live) counts() liveCounts {
	l.mu.Lock()
	defer l.mu.Unlock()
	return liveCounts{l.step, l.started, l.finished, l.failed, l.ended}
}
