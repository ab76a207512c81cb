package policy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	openai "github.com/sashabaranov/go-openai"
)

// A policy block may name several servers of one model (base_urls: vLLM
// replicas). The fleet below spreads the requests over them and keeps the
// run going when one dies:
//
//   - Each request goes to the server with the least outstanding work
//     (choices in flight). A multi-turn episode stays on the server that
//     answered its first turn, where its prefix is cached, unless that
//     server has fallen well behind the others.
//   - A server that stops answering (no HTTP answer, 502/503/504, or an
//     attempt timing out) is taken out at once; the request is repeated on
//     another server without waiting. A server whose requests run long is
//     asked GET /models; if that does not answer within probeTimeout, it
//     is taken out too and its requests are repeated elsewhere.
//   - A server taken out is probed every probeEvery (backing off to
//     probeMax) and rejoins when it answers again (a vllm policy first
//     loads its current adapter there).
//   - With every server out, requests are retried with backoff against
//     them all, as against one server; the run stops when requests keep
//     failing (the runner's max failures in a row).
//
// A policy with one server never takes it out: its requests are retried
// with backoff, as they always were.

// Fleet timings: how often a server that is out is probed (backing off to
// probeMax), how long a probe may take, and how long a request may run
// before its server's health is checked.
const (
	probeEvery   = time.Second
	probeMax     = 15 * time.Second
	probeTimeout = 5 * time.Second
	stallAfter   = 30 * time.Second
)

// EpisodeKey names one episode of a run.
type EpisodeKey struct{ Step, Group, Index int }

// EpisodeEnder is a policy that keeps state per episode (a fleet's choice
// of server); the runner tells it when an episode is over.
type EpisodeEnder interface {
	EndEpisode(k EpisodeKey)
}

// Episode is the key of the episode asking.
func (r Request) Episode() EpisodeKey { return EpisodeKey{r.Step, r.Group, r.Index} }

// server is one OpenAI-compatible endpoint of a fleet.
type server struct {
	url    string // base URL, ending in /v1 usually
	index  int
	client *openai.Client

	mu       sync.Mutex
	load     int       // choices in flight
	out      bool      // taken out of the fleet
	outSince time.Time // when it was taken out
	attempts map[*attempt]struct{}
	probing  bool // a health check of a slow server is running
	served   int  // requests answered
	adapters map[string]bool
}

// attempt is one HTTP request in flight on a server.
type attempt struct {
	started time.Time
	cancel  context.CancelCauseFunc
}

// errServerOut cancels the attempts of a server taken out of the fleet.
var errServerOut = errors.New("server taken out of the fleet")

// fleet is the servers of one policy block.
type fleet struct {
	label   string
	servers []*server
	// Under mu: probeEvery and the others by default; tests shorten them.
	probeEvery, probeMax, probeTimeout, stallAfter time.Duration
	// probe asks a server whether it answers (GET /models); rejoin
	// prepares a server that answers again before it takes requests.
	probe  func(ctx context.Context, s *server) error
	rejoin func(ctx context.Context, s *server) error

	mu       sync.Mutex
	logger   hclog.Logger
	affinity map[EpisodeKey]*server
	next     int // where the search for the least loaded server starts
	stop     chan struct{}
	wg       sync.WaitGroup
	closed   bool
}

func newFleet(label string, urls []string, client func(url string) *openai.Client) *fleet {
	f := &fleet{label: label, affinity: map[EpisodeKey]*server{}, stop: make(chan struct{}), logger: hclog.NewNullLogger(),
		probeEvery: probeEvery, probeMax: probeMax, probeTimeout: probeTimeout, stallAfter: stallAfter}
	for i, u := range urls {
		f.servers = append(f.servers, &server{url: u, index: i, client: client(u), attempts: map[*attempt]struct{}{}, adapters: map[string]bool{}})
	}
	return f
}

// start begins watching for stalled servers (a fleet of more than one).
func (f *fleet) start() {
	if len(f.servers) > 1 {
		f.wg.Add(1)
		go f.watch()
	}
}

// SetLogger sets where the fleet says that a server went out or rejoined.
func (f *fleet) SetLogger(l hclog.Logger) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l != nil {
		f.logger = l
	}
}

func (f *fleet) log() hclog.Logger {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.logger
}

// timings are the fleet's probe interval, probe timeout and stall time.
func (f *fleet) timings() (every, timeout, stall time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.probeEvery, f.probeTimeout, f.stallAfter
}

// pick chooses the server for a request of n choices by episode k and
// counts the request on it until done is called. avoid is a server the
// request just failed on: another is chosen when one is in.
func (f *fleet) pick(k EpisodeKey, n int, avoid *server) (s *server, done func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s = f.choose(k, avoid)
	for i := range n {
		f.affinity[EpisodeKey{k.Step, k.Group, k.Index + i}] = s
	}
	s.mu.Lock()
	s.load += n
	s.mu.Unlock()
	return s, func() {
		s.mu.Lock()
		s.load -= n
		s.mu.Unlock()
	}
}

// choose is pick's choice, under f.mu.
func (f *fleet) choose(k EpisodeKey, avoid *server) *server {
	if len(f.servers) == 1 {
		return f.servers[0]
	}
	type cand struct {
		s    *server
		load int
	}
	var in []cand
	for _, s := range f.servers {
		s.mu.Lock()
		if !s.out && s != avoid {
			in = append(in, cand{s, s.load})
		}
		s.mu.Unlock()
	}
	if len(in) == 0 {
		// Every server is out (or the one to avoid is the only one in):
		// try them in turn; the caller's backoff paces the attempts.
		f.next = (f.next + 1) % len(f.servers)
		s := f.servers[f.next]
		if s == avoid {
			s = f.servers[(f.next+1)%len(f.servers)]
		}
		return s
	}
	// The least loaded, ties broken in turn.
	least := in[f.next%len(in)]
	for j := range in {
		c := in[(f.next+j)%len(in)]
		if c.load < least.load {
			least = c
		}
	}
	if s, ok := f.affinity[k]; ok {
		for _, c := range in {
			// The episode's own server keeps it while it is within a few
			// requests of the least loaded one.
			if c.s == s && c.load <= least.load+max(2, least.load/8) {
				return s
			}
		}
	}
	f.next = (f.next + 1) % len(f.servers)
	return least.s
}

// EndEpisode forgets the episode's server.
func (f *fleet) EndEpisode(k EpisodeKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.affinity, k)
}

// begin registers an attempt on s; its context is cancelled when s is
// taken out.
func (s *server) begin(ctx context.Context) (context.Context, func()) {
	actx, cancel := context.WithCancelCause(ctx)
	a := &attempt{started: time.Now(), cancel: cancel}
	s.mu.Lock()
	s.attempts[a] = struct{}{}
	s.mu.Unlock()
	return actx, func() {
		s.mu.Lock()
		delete(s.attempts, a)
		s.mu.Unlock()
		cancel(nil)
	}
}

// answered counts a request s answered.
func (s *server) answered() {
	s.mu.Lock()
	s.served++
	s.mu.Unlock()
}

// isOut reports whether s is out of the fleet.
func (s *server) isOut() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out
}

// serverDown reports whether a failed attempt says its server is gone
// rather than busy or refusing this request.
func serverDown(err error) bool {
	if errors.Is(err, errServerOut) {
		return true
	}
	status, _, _ := apiFailure(err)
	switch status {
	case 0:
		return classify(err) == retryable
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// takeOut removes s from the fleet (not the last server standing of a
// one-server policy), cancels its attempts so they are repeated
// elsewhere, and starts probing it. It reports whether another server is
// in to repeat the request on.
func (f *fleet) takeOut(s *server, why error) bool {
	if len(f.servers) == 1 {
		return false
	}
	f.mu.Lock()
	closed := f.closed
	f.mu.Unlock()
	s.mu.Lock()
	already := s.out
	if !already && !closed {
		s.out, s.outSince = true, time.Now()
		for a := range s.attempts {
			a.cancel(fmt.Errorf("%w: %v", errServerOut, why))
		}
	}
	s.mu.Unlock()
	left := f.in()
	if !already && !closed {
		f.log().Warn(fmt.Sprintf("%s: server %s is out (%v); %d of %d servers left, its requests go to the others", f.label, s.url, why, left, len(f.servers)))
		f.wg.Add(1)
		go f.probeUntilBack(s)
	}
	return left > 0
}

// in counts the servers in the fleet.
func (f *fleet) in() int {
	n := 0
	for _, s := range f.servers {
		if !s.isOut() {
			n++
		}
	}
	return n
}

// probeUntilBack probes s until it answers, prepares it and lets it
// rejoin.
func (f *fleet) probeUntilBack(s *server) {
	defer f.wg.Done()
	wait, _, _ := f.timings()
	for {
		select {
		case <-f.stop:
			return
		case <-time.After(wait):
		}
		_, timeout, _ := f.timings()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		err := f.probe(ctx, s)
		if err == nil && f.rejoin != nil {
			err = f.rejoin(ctx, s)
		}
		cancel()
		if err == nil {
			s.mu.Lock()
			s.out = false
			down := time.Since(s.outSince).Round(time.Second)
			s.mu.Unlock()
			f.log().Warn(fmt.Sprintf("%s: server %s is back after %s; %d of %d servers in", f.label, s.url, down, f.in(), len(f.servers)))
			return
		}
		f.mu.Lock()
		wait = min(2*wait, f.probeMax)
		f.mu.Unlock()
	}
}

// watch checks the health of servers whose requests run long: a server
// that does not answer GET /models is taken out.
func (f *fleet) watch() {
	defer f.wg.Done()
	for {
		every, timeout, stall := f.timings()
		select {
		case <-f.stop:
			return
		case <-time.After(min(every, stall)):
		}
		for _, s := range f.servers {
			s.mu.Lock()
			slow := false
			if !s.out && !s.probing {
				for a := range s.attempts {
					if time.Since(a.started) > stall {
						slow = true
						break
					}
				}
			}
			if slow {
				s.probing = true
			}
			s.mu.Unlock()
			if !slow {
				continue
			}
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				err := f.probe(ctx, s)
				cancel()
				s.mu.Lock()
				s.probing = false
				s.mu.Unlock()
				if err != nil {
					f.takeOut(s, fmt.Errorf("requests running over %s and GET /models did not answer: %w", stall, err))
				}
			}()
		}
	}
}

// ServerStats describe one server of a fleet.
type ServerStats struct {
	URL    string
	In     bool
	Load   int // choices in flight
	Served int // requests answered
}

// Servers describes each server of the policy.
func (f *fleet) Servers() []ServerStats {
	var out []ServerStats
	for _, s := range f.servers {
		s.mu.Lock()
		out = append(out, ServerStats{URL: s.url, In: !s.out, Load: s.load, Served: s.served})
		s.mu.Unlock()
	}
	return out
}

// close stops the probes and the watch.
func (f *fleet) close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	close(f.stop)
	f.mu.Unlock()
	f.wg.Wait()
}

// urls lists the servers, for messages.
func (f *fleet) urls() string {
	var u []string
	for _, s := range f.servers {
		u = append(u, s.url)
	}
	return strings.Join(u, ", ")
}
