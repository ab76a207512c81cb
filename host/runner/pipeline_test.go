package runner

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/host/policy"
)

// launchLog is an Observer that remembers the newest step launched and
// lets a test wait for a step to start.
type launchLog struct {
	mu      sync.Mutex
	newest  int
	changed chan struct{}
}

func newLaunchLog() *launchLog { return &launchLog{newest: -1, changed: make(chan struct{})} }

func (l *launchLog) StepStarted(step int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.newest = max(l.newest, step)
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *launchLog) EpisodeStarted() {}

func (l *launchLog) launched() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.newest
}

// waitFor waits until step has started, or fails after a generous time.
func (l *launchLog) waitFor(step int) error {
	deadline := time.After(30 * time.Second)
	for {
		l.mu.Lock()
		ok, ch := l.newest >= step, l.changed
		l.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-deadline:
			return fmt.Errorf("step %d never started (newest %d)", step, l.launched())
		}
	}
}

// gateSink checks, while it holds each step, how far the rollouts ran
// ahead: step s+k may start, s+k+1 may not.
type gateSink struct {
	log    *launchLog
	ahead  int // max_off_policy_steps
	steps  int
	errs   []string
	onStep func(step int)
}

func (s *gateSink) EndStep(_ context.Context, st *Step) error {
	if want := min(st.Index+s.ahead, s.steps-1); s.ahead > 0 {
		// Rollouts go on while the sink holds the step: the launcher
		// reaches the last step it may start.
		if err := s.log.waitFor(want); err != nil {
			s.errs = append(s.errs, fmt.Sprintf("while step %d trained: %v", st.Index, err))
		}
	}
	// Nothing beyond it may start until this step is through.
	time.Sleep(5 * time.Millisecond)
	if got := s.log.launched(); got > st.Index+s.ahead {
		s.errs = append(s.errs, fmt.Sprintf("while step %d trained, step %d had started (limit %d ahead)", st.Index, got, s.ahead))
	}
	if s.onStep != nil {
		s.onStep(st.Index)
	}
	return nil
}

func TestRolloutsRunAheadByAtMostTheLimit(t *testing.T) {
	for _, ahead := range []int{0, 1, 3} {
		t.Run(fmt.Sprintf("max_off_policy_steps=%d", ahead), func(t *testing.T) {
			env := &scoreEnv{tasks: tasks("a", "b", "c")}
			be := newMemBackend()
			p := &funcPolicy{answer: func(_ context.Context, req policy.Request, _ int) (string, error) { return "right:" + req.TaskID, nil }}
			r, rec := newRunner(env, be, p, Settings{Steps: 6, BatchSize: 2, GroupSize: 3, Concurrency: 4, MaxOffPolicySteps: ahead})
			log := newLaunchLog()
			sink := &gateSink{log: log, ahead: ahead, steps: 6}
			r.Observe, r.Sinks = log, []StepSink{sink}
			res, err := r.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range sink.errs {
				t.Error(e)
			}
			if res.Summary.StepsDone != 6 || len(rec.steps) != 6 || len(rec.trajs) != 36 {
				t.Errorf("%d steps done, %d metrics lines, %d trajectories; want 6, 6, 36", res.Summary.StepsDone, len(rec.steps), len(rec.trajs))
			}
			for i, m := range rec.steps {
				if m.Step != i || m.Episodes != 6 || m.RewardMean != 1 {
					t.Errorf("metrics line %d: %+v", i, m)
				}
			}
			if be.leftovers() != 0 {
				t.Errorf("%d sandboxes left behind", be.leftovers())
			}
		})
	}
}

// versionPolicy answers as a server whose weights version is the number
// of steps the sinks are through.
type versionPolicy struct {
	funcPolicy
	mu      sync.Mutex
	version int
}

func (p *versionPolicy) Complete(ctx context.Context, req policy.Request) (policy.Response, error) {
	resp, err := p.funcPolicy.Complete(ctx, req)
	p.mu.Lock()
	v := p.version
	p.mu.Unlock()
	for i := range resp.Choices {
		resp.Choices[i].WeightsVersion = &v
	}
	return resp, err
}

func (p *versionPolicy) EndStep(context.Context, *Step) error {
	p.mu.Lock()
	p.version++
	p.mu.Unlock()
	return nil
}

// Every turn records the version of the weights that sampled it, and
// with rollouts one step ahead no step is sampled by weights more than one
// version older than those it is trained with.
func TestTurnsRecordTheWeightsVersion(t *testing.T) {
	env := &scoreEnv{tasks: tasks("a", "b"), turns: 2}
	p := &versionPolicy{funcPolicy: funcPolicy{answer: func(context.Context, policy.Request, int) (string, error) { return "x", nil }}}
	r, rec := newRunner(env, newMemBackend(), p, Settings{Steps: 5, BatchSize: 2, GroupSize: 2, Concurrency: 3, MaxTurns: 2, MaxOffPolicySteps: 1})
	r.Sinks = []StepSink{p}
	if _, err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, tr := range rec.trajs {
		if len(tr.Turns) != 2 {
			t.Fatalf("episode has %d turns", len(tr.Turns))
		}
		for _, turn := range tr.Turns {
			if turn.WeightsVersion == nil {
				t.Fatalf("step %d turn %d records no weights version", tr.Step, turn.Index)
			}
			if age := tr.Step - *turn.WeightsVersion; age < 0 || age > 1 {
				t.Errorf("step %d turn %d sampled by version %d", tr.Step, turn.Index, *turn.WeightsVersion)
			}
		}
	}
}

// A resumed run uses the episodes the earlier process finished instead of
// running them again, and does not write them again; the sinks see them.
func TestResumedEpisodesAreUsedNotRerun(t *testing.T) {
	env := &scoreEnv{tasks: tasks("a", "b", "c")}
	p := &funcPolicy{answer: func(_ context.Context, req policy.Request, _ int) (string, error) { return "right:" + req.TaskID, nil }}
	// The task order of steps 2 and 3, from an uninterrupted run.
	full, fullRec := newRunner(env, newMemBackend(), p, Settings{Steps: 4, BatchSize: 2, GroupSize: 2, Seed: 9})
	if _, err := full.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	var ahead []core.Trajectory
	for _, tr := range fullRec.trajs {
		// Step 2 finished whole, and one episode of step 3.
		if tr.Step == 2 || (tr.Step == 3 && tr.Group == 1 && tr.Index == 0) {
			tr.Info["from"] = "earlier process"
			ahead = append(ahead, tr)
		}
	}
	env.ended.Store(0)
	sink := &recordingSink{}
	var seen []core.Trajectory
	r, rec := newRunner(env, newMemBackend(), p, Settings{Steps: 4, BatchSize: 2, GroupSize: 2, Seed: 9, StartStep: 2, MaxOffPolicySteps: 1})
	r.Resumed = ahead
	r.Sinks = []StepSink{sink, stepSinkFunc(func(st *Step) { seen = append(seen, st.Trajectories...) })}
	if _, err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := env.ended.Load(); got != 3 {
		t.Errorf("%d episodes ran, want 3 (those of step 3 not finished before)", got)
	}
	if len(rec.trajs) != 3 {
		t.Errorf("%d trajectories written, want the 3 new ones", len(rec.trajs))
	}
	reused := 0
	for _, tr := range seen {
		if tr.Info["from"] != "" {
			reused++
		}
	}
	if len(seen) != 8 || reused != 5 {
		t.Errorf("the sinks saw %d episodes, %d of them resumed; want 8 and 5", len(seen), reused)
	}
}

type stepSinkFunc func(*Step)

func (f stepSinkFunc) EndStep(_ context.Context, st *Step) error { f(st); return nil }

// Ctrl-C, and a sink that fails, while later steps' episodes run: the run
// ends, every sandbox is destroyed and no goroutine is left.
func TestStopWithStepsAhead(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cancel bool
	}{{"ctrl-c while training", true}, {"sink fails", false}} {
		t.Run(tc.name, func(t *testing.T) {
			before := runtime.NumGoroutine()
			env := &scoreEnv{tasks: tasks("a", "b")}
			be := newMemBackend()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			release := make(chan struct{})
			// Episodes of step 2 and later hang until cancelled.
			p := &funcPolicy{answer: func(ctx context.Context, req policy.Request, _ int) (string, error) {
				if req.Step >= 2 {
					<-ctx.Done()
					return "", ctx.Err()
				}
				return "x", nil
			}}
			r, rec := newRunner(env, be, p, Settings{Steps: 5, BatchSize: 2, GroupSize: 2, Concurrency: 4, MaxOffPolicySteps: 2})
			log := newLaunchLog()
			r.Observe = log
			r.Sinks = []StepSink{stepSinkErr(func(st *Step) error {
				if st.Index < 1 {
					return nil
				}
				if err := log.waitFor(3); err != nil {
					return err
				}
				if tc.cancel {
					cancel()
					<-release
					return fmt.Errorf("grpo: step: %w", context.Canceled)
				}
				return errors.New("out of memory")
			})}
			go func() { time.Sleep(10 * time.Millisecond); close(release) }()
			res, err := r.Run(ctx)
			switch {
			case tc.cancel && (err != nil || !res.Interrupted):
				t.Errorf("Ctrl-C: result %+v, error %v; want an interrupted run and no error", res, err)
			case !tc.cancel && (err == nil || !strings.Contains(err.Error(), "out of memory")):
				t.Errorf("error %v, want the sink's", err)
			}
			if be.leftovers() != 0 {
				t.Errorf("%d sandboxes left behind", be.leftovers())
			}
			if len(rec.steps) != 1 {
				t.Errorf("%d metrics lines, want 1 (step 0)", len(rec.steps))
			}
			cancelled := 0
			for _, tr := range rec.trajs {
				if tr.Step >= 2 && tr.FinishReason != core.FinishCancelled {
					t.Errorf("step %d episode ended %s", tr.Step, tr.FinishReason)
				}
				if tr.FinishReason == core.FinishCancelled {
					cancelled++
				}
			}
			if cancelled == 0 {
				t.Error("no episode of a later step was running to be cancelled")
			}
			deadline := time.Now().Add(5 * time.Second)
			for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if n := runtime.NumGoroutine(); n > before {
				t.Errorf("%d goroutines left running (%d before)", n-before, before)
			}
		})
	}
}

type stepSinkErr func(*Step) error

func (f stepSinkErr) EndStep(_ context.Context, st *Step) error { return f(st) }
