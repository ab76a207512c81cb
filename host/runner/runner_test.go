package runner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/sdk/envplugin"
	"github.com/rlhost/rlhost/core/sdk/wire/lend"
	"github.com/rlhost/rlhost/host/output"
	"github.com/rlhost/rlhost/host/policy"
)

// The fakes below are in-process implementations of the runner's
// interfaces; the plugin-process paths are covered by host/cmd/rlhost's
// end-to-end tests.

// scoreEnv poses each task and rewards the reply "right:<task id>" with 1.
// A task whose id starts with "broken" fails to start; with turns > 1 an
// episode wants that many replies before it is scored.
type scoreEnv struct {
	tasks []core.Task
	turns int
	ended atomic.Int64
	onEnd func(task string) // called after an episode's End
}

func (e *scoreEnv) Tasks(context.Context) ([]core.Task, error) { return e.tasks, nil }

func (e *scoreEnv) NewEpisode(ctx context.Context, ep envplugin.Episode) (envplugin.Session, envplugin.Observation, error) {
	if strings.HasPrefix(ep.Task.ID, "broken") {
		return nil, envplugin.Observation{}, errors.New("dataset row is corrupt")
	}
	if _, err := ep.Sandbox.Exec(ctx, core.ExecRequest{Command: []string{"true"}}); err != nil {
		return nil, envplugin.Observation{}, err
	}
	return &scoreSession{env: e, task: ep.Task.ID}, envplugin.Observation{
		Messages: []core.Message{{Role: core.RoleUser, Content: "solve " + ep.Task.ID}},
	}, nil
}

type scoreSession struct {
	env   *scoreEnv
	task  string
	turns int
}

func (s *scoreSession) Step(ctx context.Context, reply core.Message) (envplugin.Observation, error) {
	if reply.Content == "explode" {
		return envplugin.Observation{}, errors.New("env crashed on this reply")
	}
	s.turns++
	if s.turns < max(1, s.env.turns) {
		return envplugin.Observation{Messages: []core.Message{{Role: core.RoleUser, Content: "go on"}}}, nil
	}
	r := 0.0
	if reply.Content == "right:"+s.task {
		r = 1
	}
	return envplugin.Observation{Done: true, Reward: r, Metrics: map[string]float64{"len": float64(len(reply.Content))}}, nil
}

func (s *scoreSession) End(context.Context, string) (envplugin.Observation, error) {
	s.env.ended.Add(1)
	if s.env.onEnd != nil {
		s.env.onEnd(s.task)
	}
	return envplugin.Observation{}, nil
}

// memBackend keeps sandboxes in a map and remembers every one it made.
type memBackend struct {
	mu      sync.Mutex
	live    map[string]core.SandboxSpec
	created int
	execs   int
}

func newMemBackend() *memBackend { return &memBackend{live: map[string]core.SandboxSpec{}} }

func (b *memBackend) Create(_ context.Context, spec core.SandboxSpec) (core.SandboxInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.created++
	id := fmt.Sprintf("sb%d", b.created)
	b.live[id] = spec
	return core.SandboxInfo{ID: id, Labels: spec.Labels}, nil
}

func (b *memBackend) Exec(_ context.Context, id string, _ core.ExecRequest) (core.ExecResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.live[id]; !ok {
		return core.ExecResult{}, fmt.Errorf("sandbox %s: %w", id, core.ErrNotFound)
	}
	b.execs++
	return core.ExecResult{}, nil
}

func (b *memBackend) ReadFile(context.Context, string, string, int64) ([]byte, error) {
	return nil, core.ErrNotFound
}
func (b *memBackend) WriteFile(context.Context, string, string, []byte, uint32) error { return nil }
func (b *memBackend) ListFiles(context.Context, string, string) ([]core.FileInfo, error) {
	return nil, nil
}

func (b *memBackend) Destroy(_ context.Context, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.live[id]; !ok {
		return core.ErrNotFound
	}
	delete(b.live, id)
	return nil
}

func (b *memBackend) leftovers() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.live)
}

// funcPolicy answers with a function of the request and counts calls.
type funcPolicy struct {
	answer func(ctx context.Context, req policy.Request, k int) (string, error)
	usage  core.Usage
	calls  atomic.Int64
	maxN   atomic.Int64
}

func (p *funcPolicy) Complete(ctx context.Context, req policy.Request) (policy.Response, error) {
	p.calls.Add(1)
	n := max(req.N, 1)
	if int64(n) > p.maxN.Load() {
		p.maxN.Store(int64(n))
	}
	resp := policy.Response{Usage: p.usage}
	for k := range n {
		text, err := p.answer(ctx, req, k)
		if err != nil {
			return policy.Response{}, err
		}
		resp.Choices = append(resp.Choices, policy.Choice{Message: core.Message{Role: core.RoleAssistant, Content: text}})
	}
	return resp, nil
}

func (p *funcPolicy) Close() error { return nil }

// memRecorder keeps what a run writes.
type memRecorder struct {
	mu      sync.Mutex
	trajs   []core.Trajectory
	steps   []core.StepMetrics
	summary output.Summary
}

func (m *memRecorder) WriteTrajectory(t core.Trajectory) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.trajs = append(m.trajs, t)
	return nil
}

func (m *memRecorder) WriteStep(s core.StepMetrics) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.steps = append(m.steps, s)
	return nil
}

func (m *memRecorder) WriteSummary(s output.Summary) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.summary = s
	return nil
}

func tasks(ids ...string) []core.Task {
	var out []core.Task
	for _, id := range ids {
		out = append(out, core.Task{ID: id})
	}
	return out
}

func newRunner(env Env, be Backend, p policy.Policy, s Settings) (*Runner, *memRecorder) {
	rec := &memRecorder{}
	if s.EpisodeTimeout == 0 {
		s.EpisodeTimeout = time.Minute
	}
	for _, v := range []*int{&s.Steps, &s.BatchSize, &s.GroupSize, &s.Concurrency, &s.MaxTurns} {
		if *v == 0 {
			*v = 1
		}
	}
	return &Runner{RunID: "test", Settings: s, EnvName: "score", Env: env, Backend: be, Policy: p, Out: rec}, rec
}

func TestGroupSharesOneRequestAndSplitsUsage(t *testing.T) {
	env := &scoreEnv{tasks: tasks("a", "b")}
	be := newMemBackend()
	// Member k of each group answers right when k is even.
	p := &funcPolicy{usage: core.Usage{PromptTokens: 10, CompletionTokens: 7, TotalTokens: 17},
		answer: func(_ context.Context, req policy.Request, k int) (string, error) {
			if (req.Index+k)%2 == 0 {
				return "right:" + req.TaskID, nil
			}
			return "wrong", nil
		}}
	r, rec := newRunner(env, be, p, Settings{Steps: 1, BatchSize: 2, GroupSize: 4, Concurrency: 8})
	if _, err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := p.calls.Load(); got != 2 {
		t.Errorf("policy calls = %d, want 2 (one per group)", got)
	}
	if got := p.maxN.Load(); got != 4 {
		t.Errorf("largest n = %d, want 4", got)
	}
	if len(rec.trajs) != 8 {
		t.Fatalf("got %d trajectories, want 8", len(rec.trajs))
	}
	prompt, compl := map[int]int{}, map[int]int{}
	for _, tr := range rec.trajs {
		want := 0.0
		if tr.Index%2 == 0 {
			want = 1
		}
		if tr.Reward != want {
			t.Errorf("group %d index %d: reward %v, want %v", tr.Group, tr.Index, tr.Reward, want)
		}
		u := tr.Turns[0].Usage
		if u.TotalTokens != u.PromptTokens+u.CompletionTokens {
			t.Errorf("usage %+v does not add up", u)
		}
		prompt[tr.Group] += u.PromptTokens
		compl[tr.Group] += u.CompletionTokens
	}
	for g := range 2 {
		if prompt[g] != 10 || compl[g] != 7 {
			t.Errorf("group %d: members' usage sums to %d prompt + %d completion, want the request's 10 + 7", g, prompt[g], compl[g])
		}
	}
	if m := rec.steps[0]; m.RewardMean != 0.5 || m.PassRate != 0.5 {
		t.Errorf("step metrics reward %v pass %v, want 0.5 and 0.5", m.RewardMean, m.PassRate)
	}
	if n := be.leftovers(); n != 0 {
		t.Errorf("%d sandboxes left behind", n)
	}
	if be.created != 8 || be.execs != 8 {
		t.Errorf("created %d sandboxes and ran %d execs, want 8 and 8", be.created, be.execs)
	}
}

func TestFinishReasons(t *testing.T) {
	answer := func(text string, err error) func(context.Context, policy.Request, int) (string, error) {
		return func(context.Context, policy.Request, int) (string, error) { return text, err }
	}
	cases := []struct {
		name      string
		turns     int // the env wants this many replies
		maxTurns  int
		answer    func(context.Context, policy.Request, int) (string, error)
		timeout   time.Duration
		task      string
		want      string
		wantError bool
	}{
		{name: "done", answer: answer("right:t", nil), task: "t", want: core.FinishDone},
		{name: "max turns", turns: 3, maxTurns: 2, answer: answer("x", nil), task: "t", want: core.FinishMaxTurns},
		{name: "context limit", answer: answer("", fmt.Errorf("too long: %w", policy.ErrContextLength)), task: "t", want: core.FinishContextLimit},
		{name: "env error", answer: answer("explode", nil), task: "t", want: core.FinishError, wantError: true},
		{name: "start error", answer: answer("x", nil), task: "broken", want: core.FinishError, wantError: true},
		{name: "timeout", timeout: 50 * time.Millisecond, task: "t", want: core.FinishTimeout, wantError: true,
			answer: func(ctx context.Context, _ policy.Request, _ int) (string, error) {
				<-ctx.Done()
				return "", ctx.Err()
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := &scoreEnv{tasks: tasks(c.task), turns: c.turns}
			be := newMemBackend()
			r, rec := newRunner(env, be, &funcPolicy{answer: c.answer}, Settings{MaxTurns: c.maxTurns, EpisodeTimeout: c.timeout})
			if _, err := r.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			tr := rec.trajs[0]
			if tr.FinishReason != c.want {
				t.Errorf("finish reason %q, want %q (error %q)", tr.FinishReason, c.want, tr.Error)
			}
			if (tr.Error != "") != c.wantError {
				t.Errorf("error %q, want error: %v", tr.Error, c.wantError)
			}
			// The episode's time, recorded on every way out: at least the
			// timeout that ended it, when one did.
			if tr.DurationMS <= 0 || (c.timeout > 0 && tr.DurationMS < float64(c.timeout.Milliseconds())) {
				t.Errorf("duration %v ms, want the episode's whole time", tr.DurationMS)
			}
			if be.leftovers() != 0 {
				t.Errorf("sandbox left behind")
			}
			if c.task != "broken" && env.ended.Load() != 1 {
				t.Errorf("End called %d times, want once", env.ended.Load())
			}
		})
	}
}

func TestCancelMarksEpisodesCancelledAndKeepsThemOutOfTheMeans(t *testing.T) {
	env := &scoreEnv{tasks: tasks("a", "b")}
	be := newMemBackend()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Task a's episodes answer right at once, and Ctrl-C comes when both
	// have ended; task b's episodes hang until then.
	var endedA atomic.Int64
	env.onEnd = func(task string) {
		if task == "a" && endedA.Add(1) == 2 {
			cancel()
		}
	}
	p := &funcPolicy{answer: func(ctx context.Context, req policy.Request, _ int) (string, error) {
		if req.TaskID == "a" {
			return "right:a", nil
		}
		<-ctx.Done()
		return "", ctx.Err()
	}}
	r, rec := newRunner(env, be, p, Settings{Steps: 3, BatchSize: 2, GroupSize: 2, Concurrency: 4, Seed: 3})
	res, err := r.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Interrupted || !res.Summary.Interrupted {
		t.Fatalf("result not marked interrupted: %+v", res)
	}
	if len(rec.steps) != 1 {
		t.Fatalf("wrote %d step lines, want 1 (the interrupted step)", len(rec.steps))
	}
	m := rec.steps[0]
	if m.Extra["cancelled"] != 2 || m.Episodes != 2 || m.Errors != 0 || m.RewardMean != 1 {
		t.Errorf("step metrics %+v: want the 2 cancelled episodes counted apart, 2 episodes with mean 1 and no errors", m)
	}
	cancelled := 0
	for _, tr := range rec.trajs {
		if tr.FinishReason == core.FinishCancelled {
			cancelled++
		}
	}
	if cancelled != 2 {
		t.Errorf("%d trajectories marked cancelled, want 2", cancelled)
	}
	if be.leftovers() != 0 {
		t.Errorf("%d sandboxes left behind", be.leftovers())
	}
}

func TestDeadPolicyStopsTheRun(t *testing.T) {
	env := &scoreEnv{tasks: tasks("a", "b", "c", "d")}
	p := &funcPolicy{answer: func(context.Context, policy.Request, int) (string, error) {
		return "", errors.New("connection refused")
	}}
	r, rec := newRunner(env, newMemBackend(), p, Settings{Steps: 50, BatchSize: 4, Concurrency: 1, MaxPolicyFailures: 3})
	_, err := r.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "3 policy requests in a row failed") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("error %v, want the run stopped after 3 failures naming the cause", err)
	}
	if n := len(rec.trajs); n > 4 {
		t.Errorf("ran %d episodes after the server died, want at most one step's 4", n)
	}
}

// A request the server refuses as invalid (HTTP 400) ends its own episode
// and the run goes on; only requests that keep failing stop it.
func TestInvalidRequestEndsOnlyItsEpisode(t *testing.T) {
	env := &scoreEnv{tasks: tasks("a", "poisoned", "b", "c")}
	p := &funcPolicy{answer: func(_ context.Context, req policy.Request, _ int) (string, error) {
		if req.TaskID == "poisoned" {
			return "", fmt.Errorf("policy: %w: messages: invalid content", policy.ErrInvalidRequest)
		}
		return "right:" + req.TaskID, nil
	}}
	r, rec := newRunner(env, newMemBackend(), p, Settings{Steps: 3, BatchSize: 4, Concurrency: 2, MaxPolicyFailures: 3})
	if _, err := r.Run(context.Background()); err != nil {
		t.Fatalf("run stopped: %v", err)
	}
	var failed int
	for _, tr := range rec.trajs {
		if tr.TaskID == "poisoned" {
			failed++
			if tr.FinishReason != core.FinishError || !strings.Contains(tr.Error, "invalid content") {
				t.Errorf("poisoned episode: finish %q, error %q", tr.FinishReason, tr.Error)
			}
		} else if tr.FinishReason != core.FinishDone {
			t.Errorf("episode of %s: finish %q, error %q", tr.TaskID, tr.FinishReason, tr.Error)
		}
	}
	if failed != 3 || len(rec.trajs) != 12 {
		t.Errorf("%d episodes, %d of them poisoned; want 12 and 3", len(rec.trajs), failed)
	}
}

// recordingSink checks what sinks see and adds a metric.
type recordingSink struct {
	steps []int
	fail  error
}

func (s *recordingSink) EndStep(_ context.Context, st *Step) error {
	s.steps = append(s.steps, st.Index)
	for i := 1; i < len(st.Trajectories); i++ {
		a, b := st.Trajectories[i-1], st.Trajectories[i]
		if a.Group > b.Group || (a.Group == b.Group && a.Index >= b.Index) {
			return fmt.Errorf("trajectories out of order at %d", i)
		}
	}
	st.Metrics.Extra["train/loss"] = float64(st.Index) + 0.5
	return s.fail
}

func TestSinksSeeOrderedStepsAndAddMetrics(t *testing.T) {
	env := &scoreEnv{tasks: tasks("a", "b", "c")}
	p := &funcPolicy{answer: func(context.Context, policy.Request, int) (string, error) { return "x", nil }}
	sink := &recordingSink{}
	r, rec := newRunner(env, newMemBackend(), p, Settings{Steps: 3, BatchSize: 3, GroupSize: 3, Concurrency: 5})
	r.Sinks = []StepSink{sink}
	if _, err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(sink.steps) != "[0 1 2]" {
		t.Errorf("sink saw steps %v", sink.steps)
	}
	for i, m := range rec.steps {
		if m.Extra["train/loss"] != float64(i)+0.5 {
			t.Errorf("step %d metrics lack the sink's value: %v", i, m.Extra)
		}
	}

	sink = &recordingSink{fail: errors.New("out of memory")}
	r, _ = newRunner(env, newMemBackend(), p, Settings{Steps: 3})
	r.Sinks = []StepSink{sink}
	if _, err := r.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "out of memory") {
		t.Errorf("sink error not returned: %v", err)
	}
	if len(sink.steps) != 1 {
		t.Errorf("run went on after a sink failed: %v", sink.steps)
	}
}

func TestResumeReplaysTaskOrder(t *testing.T) {
	env := &scoreEnv{tasks: tasks("a", "b", "c", "d", "e")}
	p := &funcPolicy{answer: func(context.Context, policy.Request, int) (string, error) { return "x", nil }}
	order := func(start int) []string {
		r, rec := newRunner(env, newMemBackend(), p, Settings{Steps: 6, BatchSize: 2, Seed: 42, StartStep: start})
		if _, err := r.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, tr := range rec.trajs {
			ids = append(ids, fmt.Sprintf("%d:%s", tr.Step, tr.TaskID))
		}
		return ids
	}
	full, resumed := order(0), order(4)
	if got, want := strings.Join(resumed, " "), strings.Join(full[8:], " "); got != want {
		t.Errorf("resumed at step 4 ran %s, the full run ran %s there", got, want)
	}
}

// lendingBackend is a memBackend that lends its sandboxes itself, as a
// plugin backend does: each destroy reports the calls it served (two
// execs, one timed out), and the destroy of failID fails.
type lendingBackend struct {
	*memBackend
	failID string
}

func (b *lendingBackend) CreateLent(ctx context.Context, spec core.SandboxSpec, defaultTimeout time.Duration) (core.SandboxInfo, lend.Lease, error) {
	info, err := b.Create(ctx, spec)
	return info, lend.NewLease("/lent/"+info.ID, []byte("tok-"+defaultTimeout.String())), err
}

func (b *lendingBackend) DestroyLent(ctx context.Context, id string) (lend.Usage, error) {
	if id == b.failID {
		return lend.Usage{}, errors.New("backend lost it")
	}
	return lend.Usage{Execs: 2, Timeouts: 1, ExecTime: 3 * time.Millisecond}, b.Destroy(ctx, id)
}

// leaseEnv is a scoreEnv that records the lease each episode's sandbox
// came with.
type leaseEnv struct {
	scoreEnv
	mu     sync.Mutex
	leases map[string]lend.Lease // by sandbox id
}

func (e *leaseEnv) NewEpisode(ctx context.Context, ep envplugin.Episode) (envplugin.Session, envplugin.Observation, error) {
	if l, ok := ep.Sandbox.(lend.Leased); ok {
		e.mu.Lock()
		e.leases[ep.Sandbox.ID()] = l.Lease()
		e.mu.Unlock()
	}
	return e.scoreEnv.NewEpisode(ctx, ep)
}

// With a backend that lends its sandboxes, each episode's sandbox carries
// the backend's lease to the env client, and the episode's sandbox metrics
// add the calls the backend served (reported at destroy) to those the host
// relayed; when the destroy fails, the metrics say they are incomplete.
func TestBackendLeaseReachesTheEnvAndItsCountsTheMetrics(t *testing.T) {
	env := &leaseEnv{scoreEnv: scoreEnv{tasks: tasks("a")}, leases: map[string]lend.Lease{}}
	be := &lendingBackend{memBackend: newMemBackend(), failID: "sb2"}
	p := &funcPolicy{answer: func(_ context.Context, req policy.Request, _ int) (string, error) { return "right:" + req.TaskID, nil }}
	r, rec := newRunner(env, be, p, Settings{Steps: 1, BatchSize: 1, GroupSize: 2, Concurrency: 1})
	r.ExecTimeout = 7 * time.Second
	if _, err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(rec.trajs) != 2 {
		t.Fatalf("got %d trajectories", len(rec.trajs))
	}
	for _, tr := range rec.trajs {
		if got := env.leases[tr.SandboxID]; got.Socket != "/lent/"+tr.SandboxID || string(got.Token()) != "tok-7s" {
			t.Errorf("%s: the env got %v (token %q)", tr.SandboxID, got, got.Token())
		}
		m := tr.Metrics
		if tr.SandboxID == be.failID {
			// The host relayed one exec; the backend's two were lost.
			if m["sandbox_execs"] != 1 || tr.Info["sandbox_metrics"] == "" || tr.Info["destroy_error"] == "" {
				t.Errorf("%s: metrics %v, info %v", tr.SandboxID, m, tr.Info)
			}
			continue
		}
		if m["sandbox_execs"] != 3 || m["sandbox_timeouts"] != 1 || m["sandbox_exec_ms"] < 3 || tr.Info["sandbox_metrics"] != "" {
			t.Errorf("%s: metrics %v, info %v; want 3 execs (1 relayed, 2 served by the backend), 1 timeout, 3+ ms", tr.SandboxID, m, tr.Info)
		}
	}
}

// A resumed run's summary describes the whole run: the steps before the
// resume (Earlier) and its own, from the run's first start.
func TestResumedSummaryCoversTheWholeRun(t *testing.T) {
	env := &scoreEnv{tasks: tasks("a", "b")}
	p := &funcPolicy{answer: func(_ context.Context, req policy.Request, _ int) (string, error) { return "right:" + req.TaskID, nil }}
	first := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	earlier := []core.StepMetrics{{Step: 0, Episodes: 2, RewardMean: 0, Errors: 1}, {Step: 1, Episodes: 2, RewardMean: 0.5}}
	sum := output.Continued(output.Summary{StartedAt: first, StepsDone: 9, Interrupted: true}, earlier, time.Now())
	r, rec := newRunner(env, newMemBackend(), p, Settings{Steps: 4, BatchSize: 2, StartStep: 2})
	r.Earlier = &sum
	res, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []output.Summary{res.Summary, rec.summary} {
		if s.StepsDone != 4 || s.TotalSteps != 4 || s.Episodes != 8 || s.Errors != 1 || len(s.StepRewardMeans) != 4 {
			t.Errorf("summary %+v: want 4 of 4 steps, 8 episodes, 1 error, 4 means", s)
		}
		if !s.StartedAt.Equal(first) || s.ResumedAt.IsZero() || s.ResumedAt.Before(first) || s.Interrupted || s.RunID != "test" {
			t.Errorf("summary started %v, resumed %v, interrupted %v, run %q", s.StartedAt, s.ResumedAt, s.Interrupted, s.RunID)
		}
		if want := (0 + 0.5*2 + 1*2 + 1*2) / 8.0; s.RewardMean != want {
			t.Errorf("reward mean %v, want %v over all 8 episodes", s.RewardMean, want)
		}
	}
	if len(sum.StepRewardMeans) != 2 {
		t.Errorf("Run changed the caller's Earlier: %v", sum.StepRewardMeans)
	}
}
