package runner

import (
	"context"
	"strings"
	"testing"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/host/policy"
)

// Episodes runs the given tasks n times each, in sandboxes, sorted by task
// and index, and writes nothing to the run's outputs.
func TestEpisodesOutsideSteps(t *testing.T) {
	env := &scoreEnv{tasks: tasks("a", "b", "c")}
	be := newMemBackend()
	p := &funcPolicy{answer: func(_ context.Context, req policy.Request, k int) (string, error) {
		if req.TaskID == "b" || (req.Index+k)%2 == 0 {
			return "right:" + req.TaskID, nil
		}
		return "wrong", nil
	}}
	r, rec := newRunner(env, be, p, Settings{Concurrency: 3, Seed: 7})
	eval := []core.Task{{ID: "c"}, {ID: "b"}}
	trajs := r.Episodes(context.Background(), 2, eval, 4)
	if len(trajs) != 8 {
		t.Fatalf("%d trajectories, want 8", len(trajs))
	}
	for k, tr := range trajs {
		g, i := k/4, k%4
		if tr.Group != g || tr.Index != i || tr.TaskID != eval[g].ID {
			t.Errorf("trajectory %d is group %d index %d task %s; want %d, %d, %s", k, tr.Group, tr.Index, tr.TaskID, g, i, eval[g].ID)
		}
		want := 0.0
		if tr.TaskID == "b" || i%2 == 0 {
			want = 1
		}
		if tr.Reward != want || tr.Error != "" {
			t.Errorf("%s/%d: reward %v error %q, want %v", tr.TaskID, i, tr.Reward, tr.Error, want)
		}
		if tr.Step != -3 || !strings.HasPrefix(tr.SandboxID, "sb") {
			t.Errorf("%s/%d: step %d sandbox %q, want step -3 (round 2) and a sandbox", tr.TaskID, i, tr.Step, tr.SandboxID)
		}
	}
	if got := p.calls.Load(); got != 2 {
		t.Errorf("%d policy calls, want one per task", got)
	}
	if len(rec.trajs) != 0 || len(rec.steps) != 0 {
		t.Errorf("episodes reached the run's outputs: %d trajectories, %d steps", len(rec.trajs), len(rec.steps))
	}
	if n := be.leftovers(); n != 0 {
		t.Errorf("%d sandboxes left behind", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got := r.Episodes(ctx, 3, eval, 4); len(got) != 0 {
		t.Errorf("a cancelled context still ran %d episodes", len(got))
	}
}
