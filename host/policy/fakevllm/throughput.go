package fakevllm

import (
	"container/heap"
	"math"
	"sync"
	"time"
)

// Throughput makes a fake server take the time a GPU serving a model
// would: it answers each request only when the request's simulated work is
// done, with every other request running beside it sharing the GPU. The
// model is vLLM's continuous batching reduced to rates:
//
//   - A request runs as a sequence per choice. At most MaxBatch sequences
//     run at once (vLLM's --max-num-seqs); a request that does not fit
//     waits, first come first served.
//   - A running request first prefills its prompt. Prompts in their
//     prefill share Prefill tokens per second equally.
//   - Then each of its sequences decodes its tokens. With n sequences
//     decoding, the server decodes PeakDecode·n/(n+HalfBatch) tokens per
//     second in all, shared equally: one sequence alone is slow, a large
//     batch approaches PeakDecode.
//   - With PrefixCache, the part of a prompt up to the longest message
//     boundary the server has already seen (an earlier turn of the same
//     conversation, or its reply) is not prefilled again, as with vLLM's
//     automatic prefix caching.
//
// Completion times are computed from these rates when something changes
// (a request arrives, ends, or is cancelled), with one timer per server,
// so a thousand requests in flight cost the fake little CPU.
type Throughput struct {
	// PeakDecode is the aggregate decode rate, in tokens per second, that
	// a large batch approaches.
	PeakDecode float64 `json:"peak_decode"`
	// HalfBatch is the number of sequences decoding at once at which the
	// aggregate rate is half of PeakDecode.
	HalfBatch float64 `json:"half_batch"`
	// Prefill is the prompt processing rate in tokens per second.
	Prefill float64 `json:"prefill"`
	// MaxBatch is the most sequences running at once; 0 means 256.
	MaxBatch int `json:"max_batch"`
	// PrefixCache skips the prefill of prompt prefixes seen before.
	PrefixCache bool `json:"prefix_cache"`
}

// Stats describe what a server has done since it started. Take two and
// subtract to describe an interval.
type Stats struct {
	Requests         int64   `json:"requests"`          // chat completions answered
	Sequences        int64   `json:"sequences"`         // choices generated
	PromptTokens     int64   `json:"prompt_tokens"`     // prompt tokens of the requests answered
	CachedTokens     int64   `json:"cached_tokens"`     // of which the prefix cache spared the prefill
	CompletionTokens int64   `json:"completion_tokens"` // tokens generated
	BusySeconds      float64 `json:"busy_seconds"`      // time with at least one request in flight
	WallSeconds      float64 `json:"wall_seconds"`      // time since the server started
	Running          int     `json:"running"`           // sequences running now
	Waiting          int     `json:"waiting"`           // requests waiting for room in the batch
	MaxRunning       int     `json:"max_running"`       // most sequences running at once so far
}

// Sub is the activity between an earlier snapshot and s.
func (s Stats) Sub(earlier Stats) Stats {
	return Stats{
		Requests: s.Requests - earlier.Requests, Sequences: s.Sequences - earlier.Sequences,
		PromptTokens: s.PromptTokens - earlier.PromptTokens, CachedTokens: s.CachedTokens - earlier.CachedTokens,
		CompletionTokens: s.CompletionTokens - earlier.CompletionTokens,
		BusySeconds:      s.BusySeconds - earlier.BusySeconds, WallSeconds: s.WallSeconds - earlier.WallSeconds,
		Running: s.Running, Waiting: s.Waiting, MaxRunning: s.MaxRunning,
	}
}

// BusyFraction is the share of the wall time with a request in flight.
func (s Stats) BusyFraction() float64 {
	if s.WallSeconds <= 0 {
		return 0
	}
	return s.BusySeconds / s.WallSeconds
}

// work is one request as the engine sees it.
type work struct {
	prompt  int   // prompt tokens in all
	cached  int   // of which need no prefill
	lengths []int // tokens each sequence generates
}

// job is a request in the engine.
type job struct {
	work
	left     int // sequences not yet finished
	endedAt  float64
	admitted bool
	decoding bool
	ended    bool
	done     chan struct{}
}

// slot is a heap entry: a prefilling job or a decoding sequence, done
// when the service level of its phase reaches target.
type slot struct {
	target float64
	j      *job
}

type slots []slot

func (h slots) Len() int           { return len(h) }
func (h slots) Less(i, k int) bool { return h[i].target < h[k].target }
func (h slots) Swap(i, k int)      { h[i], h[k] = h[k], h[i] }
func (h *slots) Push(x any)        { *h = append(*h, x.(slot)) }
func (h *slots) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// eps absorbs float rounding when a service level meets a target.
const eps = 1e-6

// engine runs the throughput model of one server. Times are seconds since
// start, as float64.
type engine struct {
	tp    Throughput
	start time.Time

	mu    sync.Mutex
	timer *time.Timer
	clock float64 // when the levels below were last brought up to date
	// Processor sharing: every prefilling job has had prefillLevel tokens
	// of service since start, beyond what it had when it entered, and
	// every decoding sequence decodeLevel; an entry is done when the
	// level reaches its target. Cancelled entries stay in the heaps and
	// are skipped; the counts are of live ones.
	prefillLevel, decodeLevel float64
	prefilling, decoding      slots
	nPrefill, nDecode         int
	running                   int // sequences admitted and not finished
	waiting                   []*job
	inFlight                  int     // requests admitted or waiting
	busySince                 float64 // when inFlight last went from 0 to 1
	stats                     Stats
	closed                    bool
}

func newEngine(tp Throughput) *engine {
	if tp.MaxBatch <= 0 {
		tp.MaxBatch = 256
	}
	return &engine{tp: tp, start: time.Now()}
}

func (e *engine) now() float64 { return time.Since(e.start).Seconds() }

// run holds the caller until w's simulated time has passed, or until
// cancel is closed (the client went away). It reports whether the work
// was done.
func (e *engine) run(w work, cancel <-chan struct{}) bool {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return false
	}
	j := e.enter(w, e.now())
	e.schedule()
	e.mu.Unlock()
	select {
	case <-j.done:
		return !e.isClosed()
	case <-cancel:
		e.mu.Lock()
		defer e.mu.Unlock()
		e.leaveEarly(j, e.now())
		e.schedule()
		return false
	}
}

// enter adds a request at time t.
func (e *engine) enter(w work, t float64) *job {
	e.advance(t)
	j := &job{work: w, left: len(w.lengths), done: make(chan struct{})}
	if e.inFlight == 0 {
		e.busySince = e.clock
	}
	e.inFlight++
	e.waiting = append(e.waiting, j)
	e.admit()
	return j
}

// leaveEarly takes out, at time t, a request whose client went away.
func (e *engine) leaveEarly(j *job, t float64) {
	e.advance(t)
	if !j.ended {
		e.drop(j)
		e.admit()
	}
}

func (e *engine) isClosed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}

// decodeRate is the tokens per second each of n decoding sequences gets.
func (e *engine) decodeRate(n int) float64 {
	return e.tp.PeakDecode / (float64(n) + e.tp.HalfBatch)
}

// nextEvent is when the next prefill or sequence ends at today's rates;
// false when nothing runs.
func (e *engine) nextEvent() (float64, bool) {
	next, ok := math.Inf(1), false
	if top, live := e.top(&e.prefilling); live {
		next, ok = min(next, e.clock+(top-e.prefillLevel)/(e.tp.Prefill/float64(e.nPrefill))), true
	}
	if top, live := e.top(&e.decoding); live {
		next, ok = min(next, e.clock+(top-e.decodeLevel)/e.decodeRate(e.nDecode)), true
	}
	return max(next, e.clock), ok
}

// top is the smallest live target of h, discarding cancelled entries.
func (e *engine) top(h *slots) (float64, bool) {
	for h.Len() > 0 {
		if s := (*h)[0]; !s.j.ended {
			return s.target, true
		}
		heap.Pop(h)
	}
	return 0, false
}

// progress brings the service levels up to time t at today's rates.
func (e *engine) progress(t float64) {
	dt := t - e.clock
	if dt <= 0 {
		return
	}
	if e.nPrefill > 0 {
		e.prefillLevel += dt * e.tp.Prefill / float64(e.nPrefill)
	}
	if e.nDecode > 0 {
		e.decodeLevel += dt * e.decodeRate(e.nDecode)
	}
	e.clock = t
}

// advance plays every event up to time t in order, so rates change
// exactly when they would have even if the timer fired late.
func (e *engine) advance(t float64) {
	for {
		next, ok := e.nextEvent()
		if !ok || next > t {
			e.progress(t)
			return
		}
		e.progress(next)
		e.complete()
		e.admit()
	}
}

// complete ends the prefills and sequences whose targets are reached.
func (e *engine) complete() {
	for {
		top, live := e.top(&e.prefilling)
		if !live || top > e.prefillLevel+eps {
			break
		}
		j := heap.Pop(&e.prefilling).(slot).j
		e.nPrefill--
		e.startDecode(j)
	}
	for {
		top, live := e.top(&e.decoding)
		if !live || top > e.decodeLevel+eps {
			break
		}
		j := heap.Pop(&e.decoding).(slot).j
		e.nDecode--
		e.running--
		j.left--
		if j.left == 0 {
			e.finish(j)
		}
	}
}

// startDecode puts j's sequences into the decoding batch; with no decode
// rate set, they are done at once.
func (e *engine) startDecode(j *job) {
	j.decoding = true
	if len(j.lengths) == 0 || e.tp.PeakDecode <= 0 {
		e.running -= len(j.lengths)
		j.left = 0
		e.finish(j)
		return
	}
	for _, n := range j.lengths {
		heap.Push(&e.decoding, slot{target: e.decodeLevel + float64(n), j: j})
		e.nDecode++
	}
}

// admit starts waiting jobs while the batch has room; a job larger than
// the whole batch runs alone.
func (e *engine) admit() {
	for len(e.waiting) > 0 {
		j := e.waiting[0]
		n := len(j.lengths)
		if e.running > 0 && e.running+n > e.tp.MaxBatch {
			return
		}
		e.waiting = e.waiting[1:]
		j.admitted = true
		e.running += n
		e.stats.MaxRunning = max(e.stats.MaxRunning, e.running)
		if fill := j.prompt - j.cached; fill > 0 && e.tp.Prefill > 0 {
			heap.Push(&e.prefilling, slot{target: e.prefillLevel + float64(fill), j: j})
			e.nPrefill++
		} else {
			e.startDecode(j)
		}
	}
}

// finish ends a job that ran to completion.
func (e *engine) finish(j *job) {
	j.ended, j.endedAt = true, e.clock
	e.stats.Requests++
	e.stats.Sequences += int64(len(j.lengths))
	e.stats.PromptTokens += int64(j.prompt)
	e.stats.CachedTokens += int64(j.cached)
	for _, n := range j.lengths {
		e.stats.CompletionTokens += int64(n)
	}
	e.leave()
	close(j.done)
}

// drop takes a job out whose client went away.
func (e *engine) drop(j *job) {
	j.ended = true
	switch {
	case !j.admitted:
		for i, w := range e.waiting {
			if w == j {
				e.waiting = append(e.waiting[:i], e.waiting[i+1:]...)
				break
			}
		}
	case !j.decoding:
		e.nPrefill--
		e.running -= len(j.lengths)
	default:
		e.nDecode -= j.left
		e.running -= j.left
	}
	e.leave()
}

// leave counts a request out of the server's busy time.
func (e *engine) leave() {
	e.inFlight--
	if e.inFlight == 0 {
		e.stats.BusySeconds += e.clock - e.busySince
	}
}

// schedule sets the timer for the next event.
func (e *engine) schedule() {
	next, ok := e.nextEvent()
	if !ok {
		if e.timer != nil {
			e.timer.Stop()
		}
		return
	}
	d := max(time.Duration((next-e.now())*1e9), time.Microsecond)
	if e.timer == nil {
		e.timer = time.AfterFunc(d, e.tick)
		return
	}
	e.timer.Reset(d)
}

func (e *engine) tick() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	e.advance(e.now())
	e.schedule()
}

// snapshot is Stats now, the busy period in progress included.
func (e *engine) snapshot() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.statsAt(e.now())
}

// statsAt is Stats at time t.
func (e *engine) statsAt(t float64) Stats {
	e.advance(t)
	s := e.stats
	s.WallSeconds = e.clock
	if e.inFlight > 0 {
		s.BusySeconds += e.clock - e.busySince
	}
	s.Running, s.Waiting = e.running, len(e.waiting)
	return s
}

// close releases every request held, as a server going away does.
func (e *engine) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	e.closed = true
	if e.timer != nil {
		e.timer.Stop()
	}
	release := func(j *job) {
		if !j.ended {
			j.ended = true
			close(j.done)
		}
	}
	for _, j := range e.waiting {
		release(j)
	}
	for _, s := range e.prefilling {
		release(s.j)
	}
	for _, s := range e.decoding {
		release(s.j)
	}
}
