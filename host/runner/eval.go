package runner

import (
	"cmp"
	"context"
	"slices"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/rlhost/rlhost/core"
)

// Episodes runs n episodes of each task outside the run's steps, at most
// Settings.Concurrency at a time, and returns their trajectories sorted by
// task (Group is the task's index in tasks) and episode index. They are
// the run's episodes in every way (sandboxes, turns, timeouts, policy
// requests) except that nothing is written to the run's outputs and no
// sink sees them: evaluation uses this. round tells calls apart in episode
// ids, sandbox labels and sampling seeds, as step -1-round, which no step
// of a run has. The context cancels the episodes in flight.
func (r *Runner) Episodes(ctx context.Context, round int, tasks []core.Task, n int) []core.Trajectory {
	if r.Logger == nil {
		r.Logger = hclog.NewNullLogger()
	}
	if r.Settings.MaxPolicyFailures <= 0 {
		r.Settings.MaxPolicyFailures = DefaultMaxPolicyFailures
	}
	step := -1 - round
	sem := make(chan struct{}, max(1, r.Settings.Concurrency))
	var mu sync.Mutex
	var out []core.Trajectory
	var wg sync.WaitGroup
launch:
	for g, task := range tasks {
		share := &groupShare{n: n}
		for i := range n {
			if r.fatalErr() != nil || ctx.Err() != nil {
				break launch
			}
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				break launch
			}
			wg.Add(1)
			go func(g, i int, task core.Task) {
				defer wg.Done()
				defer func() { <-sem }()
				t := r.episode(ctx, step, g, i, task, share)
				sanitize(&t)
				mu.Lock()
				out = append(out, t)
				mu.Unlock()
			}(g, i, task)
		}
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b core.Trajectory) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Index, b.Index))
	})
	return out
}

// Err is the fault that stopped the runner's episodes for good (a
// rejected API key, a policy server that stopped answering), or nil.
func (r *Runner) Err() error { return r.fatalErr() }
