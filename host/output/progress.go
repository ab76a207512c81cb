package output

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/rlhost/rlhost/core"
)

// redrawEvery bounds how often the live line is rewritten: often enough to
// look live, rarely enough to cost nothing with thousands of episodes.
const redrawEvery = 100 * time.Millisecond

// Progress shows a run's progress on a terminal while a step runs: one
// status line, rewritten in place, with the step's episodes done, in
// flight and failed, and an estimate of the time the step has left. Step
// lines written to it (it is an io.Writer) replace the status line, so the
// scrollback holds only those. On anything but a terminal it draws no
// status line and passes step lines through: logs and pipes get plain
// lines.
//
// The episode counts come from its callers: StepStarted (or the first
// episode of a new step) resets them, EpisodeStarted and EpisodeFinished
// move them. A caller that cannot report starts gives the concurrency to
// NewProgress instead, and "in flight" is the episodes the runner keeps
// running: min(concurrency, not yet finished). All methods are safe for
// concurrent use.
type Progress struct {
	w           io.Writer
	live        bool
	totalSteps  int
	perStep     int // episodes planned per step
	concurrency int // 0 when EpisodeStarted is called
	now         func() time.Time

	mu        sync.Mutex
	step      int
	started   int
	done      int
	failed    int
	stepStart time.Time
	drawn     time.Time // when the status line was last drawn; zero: none shown
	reported  bool      // EpisodeStarted has been called
	// ahead counts the episodes of steps after step, which run while step
	// is being trained when rollouts run ahead of training; launching is
	// the step EpisodeStarted counts for.
	ahead     map[int]*stepCounts
	launching int
}

// stepCounts are the counts of a step that runs ahead.
type stepCounts struct {
	started, done, failed int
	start                 time.Time
}

// NewProgress renders to w; it draws the live line only when w is a
// terminal. perStep is batch_size × group_size; concurrency is the run's,
// used for "in flight" until EpisodeStarted is first called.
func NewProgress(w io.Writer, totalSteps, perStep, concurrency int) *Progress {
	live := false
	if f, ok := w.(interface{ Fd() uintptr }); ok {
		live = term.IsTerminal(int(f.Fd()))
	}
	return newProgress(w, live, totalSteps, perStep, concurrency, time.Now)
}

func newProgress(w io.Writer, live bool, totalSteps, perStep, concurrency int, now func() time.Time) *Progress {
	return &Progress{w: w, live: live, totalSteps: totalSteps, perStep: perStep, concurrency: concurrency,
		now: now, stepStart: now()}
}

// StepStarted resets the counts for step (0-based, as on disk); a step
// after the one the status line shows is counted apart until the shown
// one's step line is written.
func (p *Progress) StepStarted(step int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.launching = step
	if step > p.step && (p.started > 0 || p.done > 0) {
		// The step shown has not had its step line yet: this one runs
		// ahead of it.
		p.aheadLocked(step)
		return
	}
	p.startStepLocked(step)
}

func (p *Progress) startStepLocked(step int) {
	p.step, p.started, p.done, p.failed = step, 0, 0, 0
	p.stepStart = p.now()
	if c, ok := p.ahead[step]; ok {
		p.started, p.done, p.failed, p.stepStart = c.started, c.done, c.failed, c.start
		delete(p.ahead, step)
	}
}

// aheadLocked is the counts of a step after the one shown.
func (p *Progress) aheadLocked(step int) *stepCounts {
	if p.ahead == nil {
		p.ahead = map[int]*stepCounts{}
	}
	c, ok := p.ahead[step]
	if !ok {
		c = &stepCounts{start: p.now()}
		p.ahead[step] = c
	}
	return c
}

// EpisodeStarted counts an episode that began, of the step last started.
func (p *Progress) EpisodeStarted() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reported = true
	if p.launching > p.step {
		p.aheadLocked(p.launching).started++
	} else {
		p.started++
	}
	p.drawLocked(false)
}

// EpisodeFinished counts an episode that ended: failed when it errored.
func (p *Progress) EpisodeFinished(failed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
	if failed {
		p.failed++
	}
	p.drawLocked(p.done == p.perStep)
}

// Trajectory is EpisodeFinished for a written trajectory, in the shape of
// Writer.OnTrajectory. A trajectory of a later step starts that step, or,
// while the step shown still has episodes running (rollouts ahead of
// training), counts for that later step apart.
func (p *Progress) Trajectory(t core.Trajectory) {
	p.mu.Lock()
	switch {
	case t.Step > p.step && (p.started > p.done || p.ahead[t.Step] != nil):
		c := p.aheadLocked(t.Step)
		c.done++
		if t.Error != "" {
			c.failed++
		}
		p.drawLocked(false)
		p.mu.Unlock()
		return
	case t.Step != p.step:
		p.startStepLocked(t.Step)
	}
	p.mu.Unlock()
	p.EpisodeFinished(t.Error != "")
}

// Write prints step lines (and anything else), clearing the status line
// first on a terminal.
func (p *Progress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearLocked()
	n, err := p.w.Write(b)
	if strings.HasSuffix(string(b), "\n") {
		// A step line ends a step; the next one starts its clock now.
		p.startStepLocked(p.step + 1)
	}
	return n, err
}

// Clear removes the status line, e.g. before an error message.
func (p *Progress) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearLocked()
}

func (p *Progress) clearLocked() {
	if p.live && !p.drawn.IsZero() {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.drawn = time.Time{}
	}
}

// drawLocked redraws the status line, at most every redrawEvery unless
// force.
func (p *Progress) drawLocked(force bool) {
	if !p.live {
		return
	}
	now := p.now()
	if !force && !p.drawn.IsZero() && now.Sub(p.drawn) < redrawEvery {
		return
	}
	fmt.Fprint(p.w, "\r\x1b[K"+p.statusLocked(now))
	p.drawn = now
}

// statusLocked is the status line, e.g.
//
//	step 2 (3/10)  episodes 14/64 done, 8 in flight, 1 failed  ETA 41s
func (p *Progress) statusLocked(now time.Time) string {
	var b strings.Builder
	b.WriteString(stepLabel(p.step, p.totalSteps))
	fmt.Fprintf(&b, "  episodes %d", p.done)
	if p.perStep > 0 {
		fmt.Fprintf(&b, "/%d", p.perStep)
	}
	fmt.Fprintf(&b, " done, %d in flight, %d failed", p.inFlightLocked(), p.failed)
	if len(p.ahead) > 0 {
		done := 0
		for _, c := range p.ahead {
			done += c.done
		}
		fmt.Fprintf(&b, "; %d of later steps done", done)
	}
	if p.done > 0 && p.perStep > p.done {
		per := now.Sub(p.stepStart) / time.Duration(p.done)
		eta := per * time.Duration(p.perStep-p.done)
		if eta < time.Second {
			b.WriteString("  ETA <1s")
		} else {
			fmt.Fprintf(&b, "  ETA %s", eta.Round(time.Second))
		}
	}
	return b.String()
}

func (p *Progress) inFlightLocked() int {
	if p.reported {
		n := max(0, p.started-p.done)
		for _, c := range p.ahead {
			n += max(0, c.started-c.done)
		}
		return n
	}
	left := p.perStep - p.done
	if p.concurrency > 0 {
		left = min(left, p.concurrency)
	}
	return max(0, left)
}
