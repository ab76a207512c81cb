package runner

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rlhost/rlhost/core"
)

// rollouts launches the episodes of step after step in the background,
// each step as soon as the sinks are far enough along: step s waits until
// the sinks have finished step s-1-MaxOffPolicySteps. Episodes take the
// run's concurrency slots in launch order, so an earlier step's episodes
// never wait behind a later step's. The run loop takes the finished steps
// in order with wait and reports each one the sinks are done with through
// trained.
type rollouts struct {
	r       *Runner
	ctx     context.Context // the run's: Ctrl-C cancels it
	cancel  context.CancelFunc
	sampler *sampler
	sem     chan struct{}
	resumed map[episodeKey]core.Trajectory

	wg sync.WaitGroup // the launcher and every episode

	mu         sync.Mutex
	changed    chan struct{} // closed and replaced whenever the fields below change
	trainedTo  int           // steps before this one are through the sinks
	finished   map[int]*Step // steps whose episodes have all ended, not yet taken
	launchedTo int           // steps before this one have been launched
	launching  bool          // the launcher is still running
}

type episodeKey struct{ step, group, index int }

// startRollouts starts the launcher.
func (r *Runner) startRollouts(ctx context.Context, s *sampler) *rollouts {
	rctx, cancel := context.WithCancel(ctx)
	ro := &rollouts{r: r, ctx: rctx, cancel: cancel, sampler: s, sem: make(chan struct{}, r.Settings.Concurrency),
		resumed: map[episodeKey]core.Trajectory{}, changed: make(chan struct{}),
		trainedTo: r.Settings.StartStep, launchedTo: r.Settings.StartStep, finished: map[int]*Step{}, launching: true}
	for _, t := range r.Resumed {
		ro.resumed[episodeKey{t.Step, t.Group, t.Index}] = t
	}
	ro.wg.Add(1)
	go ro.launcher()
	return ro
}

// broadcastLocked wakes everyone waiting for a change.
func (ro *rollouts) broadcastLocked() {
	close(ro.changed)
	ro.changed = make(chan struct{})
}

func (ro *rollouts) launcher() {
	defer ro.wg.Done()
	defer func() {
		ro.mu.Lock()
		ro.launching = false
		ro.broadcastLocked()
		ro.mu.Unlock()
	}()
	r := ro.r
	for step := r.Settings.StartStep; step < r.Settings.Steps; step++ {
		if !ro.gate(step) {
			return
		}
		batch := ro.sampler.next(r.Settings.BatchSize)
		if !ro.launch(step, batch) {
			return
		}
	}
}

// gate waits until step may start: the sinks are done with step
// s-1-MaxOffPolicySteps. It returns false when the run is over first.
func (ro *rollouts) gate(step int) bool {
	for {
		ro.mu.Lock()
		ok := ro.trainedTo >= step-ro.r.Settings.MaxOffPolicySteps
		changed := ro.changed
		ro.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-changed:
		case <-ro.ctx.Done():
			return false
		}
	}
}

// stepRun collects one step's episodes as they end.
type stepRun struct {
	index   int
	started time.Time

	mu       sync.Mutex
	trajs    []core.Trajectory
	pending  int  // episodes launched and not yet ended
	launched bool // every episode that will run has been launched
}

// launch starts step's batch × group episodes, each when a concurrency
// slot frees up. It returns false when it stopped short: Ctrl-C, the run
// ending, or a fault no later episode can escape.
func (ro *rollouts) launch(step int, batch []core.Task) bool {
	r := ro.r
	sr := &stepRun{index: step, started: time.Now()}
	ro.mu.Lock()
	ro.launchedTo = step + 1
	ro.mu.Unlock()
	if r.Observe != nil {
		r.Observe.StepStarted(step)
	}
	complete := true
launch:
	for g, task := range batch {
		share := &groupShare{n: r.Settings.GroupSize, seed: episodeSeed(r.Settings.Seed, step, g, 0)}
		for i := 0; i < r.Settings.GroupSize; i++ {
			if t, ok := ro.resumed[episodeKey{step, g, i}]; ok && t.TaskID == task.ID {
				sr.mu.Lock()
				sr.trajs = append(sr.trajs, t)
				sr.mu.Unlock()
				continue
			}
			if r.fatalErr() != nil {
				complete = false
				break launch
			}
			select {
			case ro.sem <- struct{}{}:
			case <-ro.ctx.Done():
				complete = false
				break launch
			}
			sr.mu.Lock()
			sr.pending++
			sr.mu.Unlock()
			if r.Observe != nil {
				r.Observe.EpisodeStarted()
			}
			ro.wg.Add(1)
			go func(g, i int, task core.Task) {
				defer ro.wg.Done()
				t := r.episode(ro.ctx, step, g, i, task, share)
				sanitize(&t)
				if err := r.Out.WriteTrajectory(t); err != nil {
					// Going on would run episodes whose results are lost.
					r.setFatal(fmt.Errorf("write trajectory: %w", err))
				}
				// The slot frees once the trajectory is written, so the
				// file's order is the episodes' when they run one at a time.
				<-ro.sem
				ro.ended(sr, t)
			}(g, i, task)
		}
	}
	sr.mu.Lock()
	sr.launched = true
	done := sr.pending == 0
	sr.mu.Unlock()
	if done {
		ro.finish(sr)
	}
	return complete
}

// ended records one episode's trajectory; the step's last one finishes it.
func (ro *rollouts) ended(sr *stepRun, t core.Trajectory) {
	sr.mu.Lock()
	sr.trajs = append(sr.trajs, t)
	sr.pending--
	done := sr.launched && sr.pending == 0
	sr.mu.Unlock()
	if done {
		ro.finish(sr)
	}
}

// finish hands a step whose episodes have all ended to wait.
func (ro *rollouts) finish(sr *stepRun) {
	// Episodes finish in any order; sinks and files downstream want them
	// by group and index.
	slices.SortFunc(sr.trajs, func(a, b core.Trajectory) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Index, b.Index))
	})
	m := aggregate(ro.r.RunID, sr.index, sr.trajs)
	st := &Step{Index: sr.index, Trajectories: sr.trajs, Metrics: &m, Started: sr.started,
		Rollout: time.Since(sr.started), Interrupted: ro.ctx.Err() != nil}
	ro.mu.Lock()
	ro.finished[sr.index] = st
	ro.broadcastLocked()
	ro.mu.Unlock()
}

// wait returns step once its episodes have all ended; false when it will
// never run (the launcher stopped before it: Ctrl-C or a fatal fault).
func (ro *rollouts) wait(ctx context.Context, step int) (*Step, bool) {
	for {
		ro.mu.Lock()
		st, ok := ro.finished[step]
		delete(ro.finished, step)
		launching := ro.launching
		changed := ro.changed
		ro.mu.Unlock()
		if ok {
			return st, true
		}
		if !launching {
			// The launcher is gone, but a step it launched may still be
			// ending; only one it never reached is lost.
			if !ro.pendingStep(step) {
				return nil, false
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			// Ctrl-C: the step's episodes are being cancelled and will
			// end shortly; wait for them so it is reported.
			<-changed
		}
	}
}

// pendingStep reports whether step was launched: it will be finished.
func (ro *rollouts) pendingStep(step int) bool {
	ro.mu.Lock()
	defer ro.mu.Unlock()
	return step < ro.launchedTo
}

// trained records that the sinks are done with step, which may let the
// launcher start step+1+MaxOffPolicySteps.
func (ro *rollouts) trained(step int) {
	ro.mu.Lock()
	ro.trainedTo = step + 1
	ro.broadcastLocked()
	ro.mu.Unlock()
}

// stop ends the rollouts: episodes still running are cancelled, and stop
// returns once every one has ended, its sandbox destroyed and its
// trajectory written. It may be called more than once.
func (ro *rollouts) stop() {
	ro.cancel()
	ro.wg.Wait()
}
