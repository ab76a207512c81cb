package serve

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"

	"github.com/rlhost/rlhost/trainer/generate"
	"github.com/rlhost/rlhost/trainer/model"
	"github.com/rlhost/rlhost/trainer/tokenizer"
)

// errClosed fails requests that were queued or running when the server
// closed.
var errClosed = errors.New("serve: server closed")

// job is one chat completion request: one prompt, n choices.
type job struct {
	ctx       context.Context
	prompt    []int32
	n         int
	maxTokens int
	opts      generate.Options // Seed set; choice c samples from stream c
	stops     []string
	topN      int // top_logprobs per token; -1 when logprobs are off

	cached int // prompt tokens whose keys and values came from the prefix cache (engine only)

	mu      sync.Mutex
	events  []event
	notify  chan struct{} // cap 1: events or an end are waiting
	left    int           // choices not finished
	err     error
	version uint64 // weights version it ran with
}

// event is one sampled token of one choice, or the end of the job.
type event struct {
	choice  int
	token   int
	logprob float32
	top     []generate.TokenLogProb
	text    string // text that became safe to show (stop strings held back)
	finish  string // set on the choice's last token
}

func newJob(ctx context.Context) *job { return &job{ctx: ctx, notify: make(chan struct{}, 1)} }

func (j *job) post(ev event) {
	j.mu.Lock()
	j.events = append(j.events, ev)
	if ev.finish != "" {
		j.left--
	}
	j.mu.Unlock()
	j.wake()
}

func (j *job) fail(err error) {
	j.mu.Lock()
	if j.err == nil && j.left > 0 {
		j.err = err
	}
	j.mu.Unlock()
	j.wake()
}

func (j *job) wake() {
	select {
	case j.notify <- struct{}{}:
	default:
	}
}

// take returns the events so far and whether the job has ended (every
// choice finished, or an error).
func (j *job) take() ([]event, bool, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	evs := j.events
	j.events = nil
	return evs, j.left == 0 || j.err != nil, j.err
}

// weights is the weights version the job runs with, once admitted.
func (j *job) weights() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.version
}

// seq is one choice of a job occupying one cache slot.
type seq struct {
	job     *job
	choice  int
	slot    int
	sampler *generate.Sampler
	next    int32   // sampled token not yet fed to the model
	count   int     // tokens sampled
	toks    []int32 // tokens sampled: the slot holds the prompt and all but the last
	textState
}

// held is the sequence an idle slot still holds keys and values for: a
// finished request's prompt and completion, kept for a later request that
// repeats them (the next turn of a conversation).
type held struct {
	ids  []int32
	used uint64 // when it was kept or last copied from, for eviction
}

// pauseReq is an Update waiting for the engine to go idle.
type pauseReq struct {
	idle   chan struct{} // closed by the engine when no sequence is running
	resume chan struct{} // closed by Update when the weights are consistent
	once   sync.Once
}

// engine runs continuous batching over the cache's slots. Only its own
// goroutine touches the model and the cache.
type engine struct {
	m       *model.Model
	tok     *tokenizer.Tokenizer
	cache   *model.Cache
	V       int
	stopIDs map[int]bool
	log     hclog.Logger
	logits  []float32
	tokText [][]byte // token id -> its bytes, for incremental text

	mu     sync.Mutex
	queue  []*job
	pause  *pauseReq
	closed bool
	wakeC  chan struct{}
	done   chan struct{}

	slots    []*seq
	held     []held              // per idle slot: what it still holds (nil ids: nothing)
	clock    uint64              // counts admissions, for held's used
	noPrefix bool                // keep nothing between requests
	alone    bool                // one sequence per forward pass (Options.Deterministic)
	samplers []*generate.Sampler // one per slot, reused across requests
	next     []int32             // per slot: the token fed in the next forward
	running  atomic.Int64        // sequences in slots, for tests and Stats
	version  atomic.Uint64
	stats    engineStats
}

// engineStats counts tokens since start.
type engineStats struct {
	generated, prompt, cached atomic.Int64
}

func newEngine(m *model.Model, tok *tokenizer.Tokenizer, cache *model.Cache, stopIDs map[int]bool, noPrefix bool, log hclog.Logger) *engine {
	V := m.Cfg.VocabSize
	e := &engine{m: m, tok: tok, cache: cache, V: V, stopIDs: stopIDs, log: log, noPrefix: noPrefix,
		logits: make([]float32, cache.Slots()*V), tokText: make([][]byte, V),
		wakeC: make(chan struct{}, 1), done: make(chan struct{}), slots: make([]*seq, cache.Slots()),
		held: make([]held, cache.Slots()), samplers: make([]*generate.Sampler, cache.Slots()), next: make([]int32, cache.Slots())}
	for id := range V {
		e.tokText[id] = []byte(tok.Decode([]int{id}))
	}
	return e
}

func (e *engine) wake() {
	select {
	case e.wakeC <- struct{}{}:
	default:
	}
}

// submit queues a job; it runs when enough slots are free and no Update is
// waiting.
func (e *engine) submit(j *job) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return errClosed
	}
	j.left = j.n
	e.queue = append(e.queue, j)
	e.wake()
	return nil
}

func (e *engine) close() {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.wake()
	<-e.done
}

// run is the engine loop: drop cancelled sequences, honour a pending
// Update, admit queued jobs into free slots, run one packed forward over
// every running sequence's next token and the admitted prompts, sample.
func (e *engine) run() {
	defer close(e.done)
	var chunks []model.Chunk
	for {
		for _, s := range e.slots {
			if s != nil && s.job.ctx.Err() != nil {
				s.job.fail(s.job.ctx.Err())
				e.release(s, false)
			}
		}
		e.mu.Lock()
		if e.closed {
			for _, j := range e.queue {
				j.fail(errClosed)
			}
			e.queue = nil
			e.mu.Unlock()
			for _, s := range e.slots {
				if s != nil {
					s.job.fail(errClosed)
					e.release(s, false)
				}
			}
			return
		}
		running := int(e.running.Load())
		if p := e.pause; p != nil && running == 0 {
			e.mu.Unlock()
			close(p.idle)
			<-p.resume
			// The weights (or the adapter) may have changed: what idle
			// slots hold was computed with the old ones.
			e.dropHeld()
			e.mu.Lock()
			if e.pause == p {
				e.pause = nil
			}
			e.mu.Unlock()
			continue
		}
		// Decode rows first, then as many queued prompts as fit, in order.
		chunks = chunks[:0]
		for _, s := range e.slots {
			if s != nil {
				e.next[s.slot] = s.next
				chunks = append(chunks, model.Chunk{Slot: s.slot, IDs: e.next[s.slot : s.slot+1]})
			}
		}
		rows := len(chunks)
		var admitted []*job
		for e.pause == nil && len(e.queue) > 0 {
			j := e.queue[0]
			if j.ctx.Err() != nil {
				j.fail(j.ctx.Err())
				e.queue = e.queue[1:]
				continue
			}
			if j.n > e.cache.Slots()-running {
				break
			}
			src, match := e.longestPrefix(j.prompt)
			if rows+len(j.prompt)-match > e.cache.Rows() {
				break
			}
			e.queue = e.queue[1:]
			j.mu.Lock()
			j.version = e.version.Load()
			j.mu.Unlock()
			e.place(j, src, match)
			running += j.n
			rows += len(j.prompt) - j.cached
			admitted = append(admitted, j)
		}
		e.mu.Unlock()
		if len(chunks) == 0 && len(admitted) == 0 {
			<-e.wakeC
			continue
		}
		decoded := len(chunks)
		for _, j := range admitted {
			chunks = append(chunks, model.Chunk{Slot: e.firstSlot(j), IDs: j.prompt[j.cached:]})
		}
		if err := e.forward(chunks); err != nil {
			e.log.Error("forward failed", "error", err)
			for _, s := range e.slots {
				if s != nil {
					s.job.fail(fmt.Errorf("serve: forward: %w", err))
					e.release(s, false)
				}
			}
			e.dropHeld()
			continue
		}
		// Who samples from which logits row: running sequences their own,
		// each admitted job's choices the row of its shared prompt.
		var work []sampleWork
		for i, ch := range chunks[:decoded] {
			work = append(work, sampleWork{s: e.slots[ch.Slot], row: i})
		}
		for k, j := range admitted {
			first := e.firstSlot(j)
			for _, s := range e.slots {
				if s != nil && s.job == j {
					if s.slot != first {
						if err := e.cache.CopyPrefix(s.slot, first, len(j.prompt)); err != nil {
							panic(err) // slots and lengths come from place: a bug
						}
					}
					work = append(work, sampleWork{s: s, row: decoded + k})
				}
			}
		}
		e.sample(work)
		for _, w := range work {
			e.advance(w)
		}
	}
}

// forward runs chunks through the model, their logits to e.logits: in one
// pass, or with alone in a pass per chunk.
func (e *engine) forward(chunks []model.Chunk) error {
	if !e.alone {
		return e.cache.Forward(chunks, e.logits[:len(chunks)*e.V])
	}
	for i := range chunks {
		if err := e.cache.Forward(chunks[i:i+1], e.logits[i*e.V:(i+1)*e.V]); err != nil {
			return err
		}
	}
	return nil
}

// longestPrefix finds the slot whose cached tokens share the longest
// prefix with prompt: an idle slot's held sequence or a running
// sequence's prompt and fed tokens. It returns -1 when none shares any.
// The match stops one short of the whole prompt, whose last token must
// be computed for its logits.
func (e *engine) longestPrefix(prompt []int32) (slot, n int) {
	slot = -1
	if e.noPrefix {
		return -1, 0
	}
	limit := len(prompt) - 1
	for b := range e.slots {
		var have, extra []int32
		switch s := e.slots[b]; {
		case s != nil:
			have, extra = s.job.prompt, s.toks
		case e.held[b].ids != nil:
			have = e.held[b].ids
		default:
			continue
		}
		l := commonPrefix(prompt[:limit], have, extra, e.cache.Len(b))
		if l > n {
			slot, n = b, l
		}
	}
	return slot, n
}

// commonPrefix is the length of the common prefix of p and the first
// within tokens of a followed by b.
func commonPrefix(p, a, b []int32, within int) int {
	n := 0
	for n < len(p) && n < within {
		var t int32
		if n < len(a) {
			t = a[n]
		} else {
			t = b[n-len(a)]
		}
		if t != p[n] {
			break
		}
		n++
	}
	return n
}

// place gives each of j's choices a slot, reusing match cached tokens of
// slot src (-1: none). Choice 0 continues an idle slot's held sequence
// in place when the prompt repeats at least half of it (the next turn of
// that conversation); otherwise it takes a free slot and the shared
// prefix's keys and values are copied there. Free slots go lowest first
// among those holding nothing (so sequences stay adjacent and share
// attention calls), then least recently used.
func (e *engine) place(j *job, src, match int) {
	e.clock++
	e.stats.prompt.Add(int64(len(j.prompt)))
	e.stats.cached.Add(int64(match))
	j.cached = match
	first := -1
	if src >= 0 && e.slots[src] == nil && 2*match >= len(e.held[src].ids) {
		first = src
		e.held[src].ids = nil
		e.truncate(src, match)
	} else {
		first = e.freeSlot(src)
		if src >= 0 {
			if err := e.cache.CopyPrefix(first, src, match); err != nil {
				panic(err) // slots and lengths come from longestPrefix: a bug
			}
			e.held[src].used = e.clock
		} else {
			e.truncate(first, 0)
		}
	}
	e.seat(j, 0, first)
	for c := 1; c < j.n; c++ {
		slot := e.freeSlot(-1)
		e.truncate(slot, 0)
		e.seat(j, c, slot)
	}
	e.running.Add(int64(j.n))
}

// seat makes slot run choice c of j.
func (e *engine) seat(j *job, c, slot int) {
	e.held[slot].ids = nil
	sm := e.samplers[slot]
	if sm == nil {
		sm = generate.NewSampler(e.V, j.opts, uint64(c))
		e.samplers[slot] = sm
	} else {
		sm.Reset(j.opts, uint64(c))
	}
	e.slots[slot] = &seq{job: j, choice: c, slot: slot, sampler: sm}
}

// freeSlot returns a slot no sequence runs in, other than keep: the lowest
// holding nothing, else the least recently used held one (evicted). The
// caller has checked that one exists.
func (e *engine) freeSlot(keep int) int {
	lru := -1
	for b, s := range e.slots {
		if s != nil || b == keep {
			continue
		}
		if e.held[b].ids == nil {
			return b
		}
		if lru < 0 || e.held[b].used < e.held[lru].used {
			lru = b
		}
	}
	if lru < 0 { // only keep is free
		lru = keep
	}
	e.held[lru].ids = nil
	return lru
}

func (e *engine) truncate(slot, n int) {
	if err := e.cache.Truncate(slot, n); err != nil {
		panic(err) // n comes from the slot's own length: a bug
	}
}

func (e *engine) firstSlot(j *job) int {
	for _, s := range e.slots {
		if s != nil && s.job == j && s.choice == 0 {
			return s.slot
		}
	}
	panic("serve: job without slots")
}

// release frees s's slot; with keep (a finished sequence) the slot goes
// on holding its tokens' keys and values for a later request.
func (e *engine) release(s *seq, keep bool) {
	if keep && !e.noPrefix {
		n := e.cache.Len(s.slot)
		ids := make([]int32, 0, len(s.job.prompt)+len(s.toks))
		ids = append(append(ids, s.job.prompt...), s.toks...)[:n]
		e.held[s.slot] = held{ids: ids, used: e.clock}
	} else {
		e.truncate(s.slot, 0)
	}
	e.slots[s.slot] = nil
	e.running.Add(-1)
}

// dropHeld forgets what every idle slot holds.
func (e *engine) dropHeld() {
	for b := range e.held {
		if e.held[b].ids != nil {
			e.held[b].ids = nil
			e.truncate(b, 0)
		}
	}
}

type sampleWork struct {
	s   *seq
	row int
	tok int
	lp  float32
	top []generate.TokenLogProb
}

// sample draws every sequence's next token, in parallel: samplers and
// logits rows are per sequence, and the model is not touched.
func (e *engine) sample(work []sampleWork) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(len(work), runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(work) {
					return
				}
				w := &work[i]
				lg := e.logits[w.row*e.V : (w.row+1)*e.V]
				// Keyed by position, so each turn of a conversation that
				// repeats its seed draws afresh.
				w.tok, w.lp = w.s.sampler.Sample(lg, len(w.s.job.prompt)+w.s.count)
				if n := w.s.job.topN; n > 0 {
					w.top = w.s.sampler.TopLogProbs(lg, n)
				}
			}
		})
	}
	wg.Wait()
}

// advance records one sampled token: text, stop strings, finish.
func (e *engine) advance(w sampleWork) {
	s, j := w.s, w.s.job
	s.count++
	s.toks = append(s.toks, int32(w.tok))
	e.stats.generated.Add(1)
	// An end token finishes the turn; it is returned in token_ids but is
	// not part of the text.
	end := e.stopIDs[w.tok]
	piece := e.tokText[w.tok]
	if end {
		piece = nil
	}
	text, stopped := s.add(piece, j.stops, end || s.count >= j.maxTokens)
	finish := ""
	switch {
	case end || stopped:
		finish = "stop"
	case s.count >= j.maxTokens:
		finish = "length"
	}
	s.next = int32(w.tok)
	if finish != "" {
		e.release(s, true)
	}
	j.post(event{choice: s.choice, token: w.tok, logprob: w.lp, top: w.top, text: text, finish: finish})
}

// textState is one choice's text as its tokens arrive.
type textState struct {
	text  []byte
	shown int // bytes already handed out
}

// add appends piece and returns the text that became safe to show, and
// whether a stop string ended the text (it is cut off, with what
// follows). Until final, a tail that could still become a stop string or
// is an incomplete UTF-8 character is held back.
func (t *textState) add(piece []byte, stops []string, final bool) (string, bool) {
	from := len(t.text)
	t.text = append(t.text, piece...)
	cut := findStop(t.text, stops, from)
	if cut >= 0 {
		t.text, final = t.text[:cut], true
	}
	safe := len(t.text)
	if !final {
		safe = safeLen(t.text, stops)
	}
	// Shown text never holds the start of a stop string (safeLen held it
	// back), so a cut cannot fall before it; clamp anyway rather than
	// slice out of range.
	t.shown = min(t.shown, len(t.text))
	safe = max(safe, t.shown)
	out := string(t.text[t.shown:safe])
	t.shown = safe
	return out, cut >= 0
}

// findStop returns where the earliest stop string starts in text, looking
// only at matches that end after byte from, or -1.
func findStop(text []byte, stops []string, from int) int {
	cut := -1
	for _, st := range stops {
		lo := max(0, from-len(st)+1)
		if i := bytes.Index(text[lo:], []byte(st)); i >= 0 && (cut < 0 || lo+i < cut) {
			cut = lo + i
		}
	}
	return cut
}

// safeLen is how much of text may be shown now: not a tail that could be
// the start of a stop string, nor an incomplete UTF-8 character.
func safeLen(text []byte, stops []string) int {
	safe := len(text)
	for _, st := range stops {
		for k := min(len(st)-1, len(text)); k > 0; k-- {
			if bytes.HasSuffix(text, []byte(st[:k])) {
				safe = min(safe, len(text)-k)
				break
			}
		}
	}
	for i := safe - 1; i >= 0 && i >= safe-utf8.UTFMax; i-- {
		if utf8.RuneStart(text[i]) {
			if !utf8.FullRune(text[i:safe]) {
				safe = i
			}
			break
		}
	}
	return safe
}
