package dashboard

import (
	"sync"

	"github.com/rlhost/rlhost/core"
)

// Live counts the episodes of the run this process runs, as the runner
// starts and ends them, so the page shows episodes in flight exactly
// rather than estimated from the files. With rollouts running ahead of
// training, episodes of several steps run at once: each step is counted
// apart, and the page shows the oldest step still running. Its methods
// have the shapes of runner.Observer and output.Writer.OnTrajectory's
// callback, and are safe for concurrent use.
type Live struct {
	mu        sync.Mutex
	version   uint64
	steps     map[int]*stepCount // steps with episodes started, until all have ended
	launching int                // the step EpisodeStarted counts for
	newest    int                // the newest step that ended an episode
	ended     bool
}

type stepCount struct{ started, finished, failed int }

// StepStarted makes step the one EpisodeStarted counts for.
func (l *Live) StepStarted(step int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.steps == nil {
		l.steps = map[int]*stepCount{}
	}
	for s, c := range l.steps {
		if c.finished >= c.started {
			delete(l.steps, s)
		}
	}
	if l.steps[step] == nil {
		l.steps[step] = &stepCount{}
	}
	l.launching = step
	l.version++
}

// EpisodeStarted counts an episode that began.
func (l *Live) EpisodeStarted() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.steps[l.launching]; c != nil {
		c.started++
	}
	l.version++
}

// EpisodeFinished counts an episode that ended.
func (l *Live) EpisodeFinished(t core.Trajectory) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.steps[t.Step]
	if c == nil {
		return // a step that StepStarted has not announced; ignore
	}
	c.finished++
	if t.Error != "" {
		c.failed++
	}
	l.newest = max(l.newest, t.Step)
	// A step all of whose episodes ended is done, unless it is still
	// being launched.
	if c.finished >= c.started && t.Step != l.launching {
		delete(l.steps, t.Step)
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
	step, finished, failed int // of the oldest step still running
	inFlight               int // episodes of every step
	ended                  bool
}

func (l *Live) counts() liveCounts {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := liveCounts{step: l.launching, ended: l.ended}
	oldest := -1
	for step, sc := range l.steps {
		c.inFlight += max(0, sc.started-sc.finished)
		if sc.started > sc.finished && (oldest < 0 || step < oldest) {
			oldest = step
		}
	}
	if oldest >= 0 {
		c.step = oldest
	}
	if sc := l.steps[c.step]; sc != nil {
		c.finished, c.failed = sc.finished, sc.failed
	}
	return c
}
