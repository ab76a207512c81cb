package policy

import (
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/host/policy/fakevllm"
)

// replica is one fake vLLM server behind a proxy a test can break: dead
// (connections closed at once, as a killed process's port refuses them)
// or stalled (requests hang, as a frozen process's do).
type replica struct {
	fv    *fakevllm.Server
	front *httptest.Server

	mu      sync.Mutex
	dead    bool
	stalled chan struct{} // closed to end a stall; nil when not stalled
	chats   []int64       // the seed of each chat request served
}

func newReplica(t *testing.T, opts fakevllm.Options) *replica {
	t.Helper()
	r := &replica{fv: fakevllm.New(opts)}
	t.Cleanup(r.fv.Close)
	target, _ := url.Parse(r.fv.URL())
	proxy := httputil.NewSingleHostReverseProxy(target)
	// A request a test cuts off is expected; its log line is noise.
	proxy.ErrorLog = log.New(io.Discard, "", 0)
	r.front = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		dead, stall := r.dead, r.stalled
		r.mu.Unlock()
		if dead {
			hj, _ := w.(http.Hijacker)
			if c, _, err := hj.Hijack(); err == nil {
				c.Close()
			}
			return
		}
		if stall != nil {
			select {
			case <-stall:
			case <-req.Context().Done():
				return
			}
		}
		if strings.HasSuffix(req.URL.Path, "/chat/completions") {
			body, _ := io.ReadAll(req.Body)
			var b struct {
				Seed int64 `json:"seed"`
			}
			_ = json.Unmarshal(body, &b)
			r.mu.Lock()
			r.chats = append(r.chats, b.Seed)
			r.mu.Unlock()
			req.Body = io.NopCloser(strings.NewReader(string(body)))
			req.ContentLength = int64(len(body))
		}
		proxy.ServeHTTP(w, req)
	}))
	t.Cleanup(r.front.Close)
	return r
}

func (r *replica) url() string { return r.front.URL + "/v1" }

func (r *replica) setDead(dead bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dead = dead
}

func (r *replica) stall() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stalled = make(chan struct{})
}

func (r *replica) unstall() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stalled != nil {
		close(r.stalled)
		r.stalled = nil
	}
}

func (r *replica) served() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.chats)
}

// fleetPolicy builds a policy of provider over the replicas, with the
// fleet's timings shortened so a test sees probes and stalls at once.
func fleetPolicy(t *testing.T, provider string, reps ...*replica) *openAIPolicy {
	p := newFleetPolicy(t, provider, reps...)
	if v, ok := p.(*VLLM); ok {
		return v.openAIPolicy
	}
	return p.(*openAIPolicy)
}

func newFleetPolicy(t *testing.T, provider string, reps ...*replica) Policy {
	t.Helper()
	var urls []string
	for _, r := range reps {
		urls = append(urls, r.url())
	}
	p, err := New(Config{Name: "fleet", Provider: provider, BaseURLs: urls, Model: ptr("base"),
		MaxRetries: ptr(3), BackoffBase: ptr("1ms"), BackoffMax: ptr("5ms"), Timeout: ptr("20s")}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	var f *fleet
	switch v := p.(type) {
	case *openAIPolicy:
		f = v.fleet
	case *VLLM:
		f = v.fleet
	}
	f.mu.Lock()
	f.probeEvery, f.probeMax, f.probeTimeout, f.stallAfter = 10*time.Millisecond, 40*time.Millisecond, 200*time.Millisecond, 300*time.Millisecond
	f.mu.Unlock()
	return p
}

func turnReq(episode, turn int) Request {
	return Request{Messages: []core.Message{{Role: core.RoleUser, Content: "hi"}}, TaskID: "t", Group: episode, Turn: turn, Seed: int64(1000 + episode)}
}

// waitUntil polls cond for a generous time.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestFleetSpreadsRequestsAndKeepsEpisodesTogether(t *testing.T) {
	reps := []*replica{newReplica(t, fakevllm.Options{BaseModel: "base"}), newReplica(t, fakevllm.Options{BaseModel: "base"}), newReplica(t, fakevllm.Options{BaseModel: "base"})}
	p := fleetPolicy(t, "openai", reps...)
	if err := p.Check(context.Background(), nil); err != nil {
		t.Fatalf("check: %v", err)
	}
	// 30 episodes of 3 turns, one at a time: each starts on the least
	// loaded server (all idle: they take turns) and stays there.
	for ep := range 30 {
		for turn := range 3 {
			if _, err := p.Complete(context.Background(), turnReq(ep, turn)); err != nil {
				t.Fatal(err)
			}
		}
		p.EndEpisode(turnReq(ep, 0).Episode())
	}
	where := map[int64]map[int]bool{}
	for i, r := range reps {
		got := r.served()
		if len(got) < 15 {
			t.Errorf("server %d served %d of 90 requests", i, len(got))
		}
		for _, seed := range got {
			if where[seed] == nil {
				where[seed] = map[int]bool{}
			}
			where[seed][i] = true
		}
	}
	for seed, servers := range where {
		if len(servers) != 1 {
			t.Errorf("episode %d was served by %d servers", seed-1000, len(servers))
		}
	}
	p.fleet.mu.Lock()
	left := len(p.fleet.affinity)
	p.fleet.mu.Unlock()
	if left != 0 {
		t.Errorf("%d episodes still remembered after they ended", left)
	}
}

// An episode keeps its server while that one is within a few requests of
// the least loaded; past that, it moves.
func TestFleetAffinityYieldsToLoad(t *testing.T) {
	f := newFleet("f", []string{"a", "b"}, func(string) *openai.Client { return nil })
	defer f.close()
	ep := EpisodeKey{Step: 1}
	first, done := f.pick(ep, 1, nil)
	done()
	// Load the episode's server a little: it keeps the episode.
	first.load = 2
	if s, done := f.pick(ep, 1, nil); s != first {
		t.Errorf("a server 2 requests busier lost the episode")
	} else {
		done()
	}
	first.load = 20
	s, done := f.pick(ep, 1, nil)
	done()
	if s == first {
		t.Errorf("a server 20 requests busier kept the episode")
	}
	// Taken out, a server gets no requests while another is in.
	f.servers[1].out = true
	for range 5 {
		s, done := f.pick(EpisodeKey{Index: 7}, 1, nil)
		done()
		if s == f.servers[1] {
			t.Fatal("a server out of the fleet got a request")
		}
	}
}

// A server that dies mid-run: its requests go to the others at once, no
// request fails, and it rejoins when it answers again.
func TestFleetSurvivesADeadServer(t *testing.T) {
	a, b := newReplica(t, fakevllm.Options{BaseModel: "base"}), newReplica(t, fakevllm.Options{BaseModel: "base"})
	p := fleetPolicy(t, "openai", a, b)
	var failed atomic.Int64
	run := func(from, n int) {
		var wg sync.WaitGroup
		for ep := from; ep < from+n; ep++ {
			wg.Go(func() {
				for turn := range 2 {
					if _, err := p.Complete(context.Background(), turnReq(ep, turn)); err != nil {
						failed.Add(1)
						t.Errorf("episode %d turn %d: %v", ep, turn, err)
					}
				}
				p.EndEpisode(turnReq(ep, 0).Episode())
			})
		}
		wg.Wait()
	}
	run(0, 20)
	a.setDead(true)
	run(20, 40)
	if failed.Load() != 0 {
		t.Fatalf("%d requests failed", failed.Load())
	}
	st := p.Servers()
	if st[0].In || !st[1].In {
		t.Fatalf("after server a died: %+v", st)
	}
	servedA := len(a.served())
	a.setDead(false)
	waitUntil(t, "the server is back", func() bool { return p.Servers()[0].In })
	run(60, 20)
	if len(a.served()) == servedA {
		t.Error("the server that came back got no requests")
	}
}

// A server that hangs: once its requests run long and it does not answer
// a probe, it is taken out and its requests finish on another.
func TestFleetTakesAStalledServerOut(t *testing.T) {
	a, b := newReplica(t, fakevllm.Options{BaseModel: "base"}), newReplica(t, fakevllm.Options{BaseModel: "base"})
	p := fleetPolicy(t, "openai", a, b)
	a.stall()
	defer a.unstall()
	var wg sync.WaitGroup
	for ep := range 8 {
		wg.Go(func() {
			if _, err := p.Complete(context.Background(), turnReq(ep, 0)); err != nil {
				t.Errorf("episode %d: %v", ep, err)
			}
		})
	}
	wg.Wait()
	if p.Servers()[0].In {
		t.Error("the stalled server is still in")
	}
	if n := len(b.served()); n != 8 {
		t.Errorf("the healthy server answered %d of 8 requests", n)
	}
}

// Every server must pass pre-flight; the error names the one that did not.
func TestFleetCheckNamesTheFailingServer(t *testing.T) {
	a := newReplica(t, fakevllm.Options{BaseModel: "base"})
	b := newReplica(t, fakevllm.Options{BaseModel: "other"})
	p := fleetPolicy(t, "openai", a, b)
	err := p.Check(context.Background(), nil)
	if err == nil || !strings.Contains(err.Error(), b.front.URL) || strings.Contains(err.Error(), a.front.URL) {
		t.Fatalf("check: %v; want an error naming %s only", err, b.front.URL)
	}
}

// Adapters go to every server; a server that is down when one is pushed
// is taken out and loads the current adapter when it comes back; an
// adapter switched away from is unloaded only when no request names it.
func TestFleetAdapters(t *testing.T) {
	opts := fakevllm.Options{BaseModel: "base", AllowRuntimeLoRA: true}
	a, b := newReplica(t, opts), newReplica(t, opts)
	v := newFleetPolicy(t, "vllm", a, b).(*VLLM)
	ctx := context.Background()
	if err := v.CheckAdapterAPI(ctx); err != nil {
		t.Fatal(err)
	}
	if err := v.SwitchAdapter(ctx, "run-step-1", peftDir(t, 8), 1); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*replica{a, b} {
		if got := r.fv.Loaded(); !slices.Equal(got, []string{"run-step-1"}) {
			t.Errorf("server has %v loaded", got)
		}
	}
	resp, err := v.Complete(ctx, turnReq(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	if w := resp.Choices[0].WeightsVersion; w == nil || *w != 1 {
		t.Errorf("choice sampled by version %v, want 1", w)
	}

	// Switch while a is dead: it is taken out, and loads run-step-2 when back.
	a.setDead(true)
	if err := v.SwitchAdapter(ctx, "run-step-2", peftDir(t, 8), 2); err != nil {
		t.Fatalf("switch with one server down: %v", err)
	}
	if v.Servers()[0].In {
		t.Error("the server that missed the adapter is still in")
	}
	if got := b.fv.Loaded(); !slices.Equal(got, []string{"run-step-2"}) {
		t.Errorf("server b has %v loaded, want only run-step-2", got)
	}
	a.setDead(false)
	waitUntil(t, "server a rejoins", func() bool { return v.Servers()[0].In })
	if got := a.fv.Loaded(); !slices.Contains(got, "run-step-2") {
		t.Errorf("server a came back with %v loaded", got)
	}

	// An adapter in use when the next one arrives is unloaded after its
	// last request.
	held := v.acquire()
	if err := v.SwitchAdapter(ctx, "run-step-3", peftDir(t, 8), 3); err != nil {
		t.Fatal(err)
	}
	if got := b.fv.Loaded(); !slices.Contains(got, "run-step-2") {
		t.Errorf("run-step-2 unloaded while a request named it: %v", got)
	}
	v.release(held)
	if got := b.fv.Loaded(); slices.Contains(got, "run-step-2") {
		t.Errorf("run-step-2 still loaded after its last request: %v", got)
	}
}

func TestBaseURLsConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Name: "p", Provider: "openai", Model: ptr("m"), BaseURL: ptr("http://a/v1"), BaseURLs: []string{"http://b/v1"}}, "not both"},
		{Config{Name: "p", Provider: "openai", Model: ptr("m"), BaseURLs: []string{}}, "empty"},
		{Config{Name: "p", Provider: "openai", Model: ptr("m"), BaseURLs: []string{"http://a/v1", "http://a/v1"}}, "listed twice"},
		{Config{Name: "p", Provider: "vllm", Model: ptr("m")}, "base_urls for several"},
	} {
		_, err := New(tc.cfg, t.TempDir())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.cfg, err, tc.want)
		}
	}
}
