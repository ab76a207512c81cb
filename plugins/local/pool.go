package local

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/plugins/backendkit/pace"
)

// pool keeps sandboxes of the block's spec ready for the next creates:
// pool_size warm ones built ahead, and (recycle) ones whose last user
// destroyed them, reset on their way back. Every sandbox it holds keeps
// its place under max_sandboxes.
//
// It knows the backend only through the two functions it is given, to
// build a sandbox and to destroy one; the backend registers what it takes
// and resets what it gives back.
type pool struct {
	spec    core.SandboxSpec // the block's: what every pooled sandbox was made with
	live    *pace.Cap        // sandboxes existing or being created, against max_sandboxes
	build   func(ctx context.Context) (*sandbox, error)
	destroy func(sb *sandbox)

	mu        sync.Mutex
	ready     []*sandbox
	want      int  // pool_size; 0: none is built ahead
	refill    bool // with recycling, refill only while fewer than want exist
	peak      int  // the most sandboxes alive at once: what recycling keeps without pool_size
	returning int  // sandboxes reserved a place, being reset on their way back
	closed    bool
	wake      chan struct{}
	stop      chan struct{}
	done      chan struct{}
}

// refillDelay defers topping up the pool after a take.
const refillDelay = 5 * time.Millisecond

// newPool is an empty pool of spec's sandboxes that builds none ahead
// until start. build makes a sandbox of spec in a place already taken
// under live; destroy tears down one whose user is gone.
func newPool(spec core.SandboxSpec, live *pace.Cap, build func(context.Context) (*sandbox, error), destroy func(*sandbox)) *pool {
	return &pool{spec: spec, live: live, build: build, destroy: destroy}
}

// start keeps n sandboxes warm from now on; with recycle, destroyed ones
// come back, so the pool is refilled only while fewer than n exist.
func (p *pool) start(n int, recycle bool) {
	p.mu.Lock()
	p.want, p.refill = n, recycle
	p.wake = make(chan struct{}, 1)
	p.stop = make(chan struct{})
	p.done = make(chan struct{})
	wake, stop, done := p.wake, p.stop, p.done
	p.mu.Unlock()
	go p.fill(wake, stop, done)
	p.kick()
}

// kick has the pool check whether it needs topping up.
func (p *pool) kick() {
	p.mu.Lock()
	wake := p.wake
	p.mu.Unlock()
	if wake != nil {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
}

// fill keeps pool_size sandboxes warm, within max_sandboxes, until stop
// is closed; then it closes done.
func (p *pool) fill(wake, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	for {
		select {
		case <-stop:
			return
		case <-wake:
		}
		for p.fillOne() {
		}
	}
}

// fillOne builds one warm sandbox if the pool wants one; false when it
// does not, or the build failed (retried at the next kick).
func (p *pool) fillOne() bool {
	p.mu.Lock()
	need := len(p.ready) < p.want && !p.closed
	if p.refill {
		// Sandboxes in use or being reset come back to the pool: it is
		// topped up only while fewer than pool_size exist, not while
		// episodes take from it as it fills, which would build a sandbox
		// per take and destroy as many at their return.
		need = need && p.live.InUse() < p.want
	}
	p.mu.Unlock()
	if !need || p.admit() != nil {
		return false
	}
	if p.refill && p.live.InUse() > p.want {
		// An episode's Create took the last place meanwhile.
		p.live.Put()
		return false
	}
	sb, err := p.build(context.Background())
	p.mu.Lock()
	if err != nil || p.closed {
		p.mu.Unlock()
		p.live.Put()
		if sb != nil {
			sb.impl.stop()
			sb.entry.release()
		}
		return false
	}
	p.ready = append(p.ready, sb)
	p.mu.Unlock()
	return true
}

// admit counts a sandbox against max_sandboxes from the start of its
// creation, so creates in flight cannot overshoot the cap.
func (p *pool) admit() error {
	if !p.live.TryTake() {
		return fmt.Errorf("local backend: %d sandboxes exist (max_sandboxes = %d): %w", p.live.InUse(), p.live.Limit(), core.ErrLimitReached)
	}
	p.mu.Lock()
	p.peak = max(p.peak, p.live.InUse())
	p.mu.Unlock()
	return nil
}

// free gives a destroyed sandbox's place back, and lets the pool refill.
func (p *pool) free() {
	p.live.Put()
	p.kick()
}

// forgetPeak keeps nothing for creates that may never come: recycling
// keeps only as many as are in use from now on.
func (p *pool) forgetPeak() {
	p.mu.Lock()
	p.peak = 0
	p.mu.Unlock()
}

// take returns a ready sandbox if spec matches the pool's (labels and TTL
// aside, which the taker sets), or nil.
func (p *pool) take(spec core.SandboxSpec) *sandbox {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ready) == 0 || !sameShape(spec, p.spec) {
		return nil
	}
	for len(p.ready) > 0 {
		sb := p.ready[0]
		p.ready = p.ready[1:]
		if sb.impl.alive() {
			// Refill a moment later: a new init competes for CPU with the
			// first command the caller is about to run in this one.
			time.AfterFunc(refillDelay, p.kick)
			return sb
		}
		p.mu.Unlock()
		p.destroy(sb)
		p.mu.Lock()
	}
	return nil
}

// add puts a fresh sandbox of the pool's spec, never used, in the pool.
func (p *pool) add(sb *sandbox) {
	p.mu.Lock()
	p.ready = append(p.ready, sb)
	p.mu.Unlock()
}

// evict destroys one sandbox kept for reuse when there is no pool_size, so
// that a create which cannot use it (another spec) gets its place under
// max_sandboxes; false if there is none. The sandboxes pool_size asked
// for stay.
func (p *pool) evict() bool {
	p.mu.Lock()
	if p.want > 0 || len(p.ready) == 0 {
		p.mu.Unlock()
		return false
	}
	sb := p.ready[0]
	p.ready = p.ready[1:]
	p.mu.Unlock()
	sb.impl.stop()
	sb.entry.release()
	p.live.Put()
	return true
}

// keepMax is how many sandboxes the pool may hold: pool_size, or without
// one the most that were alive at once, so a run that destroys and
// creates at a steady concurrency stops creating. Call with p.mu held.
func (p *pool) keepMax() int {
	if p.want > 0 {
		return p.want
	}
	return p.peak
}

// reserve holds a place for a sandbox on its way back from its last user;
// false when the pool holds all it may, or is closed. Each true reserve
// ends with putBack.
func (p *pool) reserve() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.ready)+p.returning >= p.keepMax() {
		return false
	}
	p.returning++
	return true
}

// putBack ends a reserve: sb, reset when fresh, joins the pool if there is
// still room; it reports whether it did. A sandbox not kept is the
// caller's to tear down, and then to free.
func (p *pool) putBack(sb *sandbox, fresh bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.returning--
	keep := fresh && !p.closed && len(p.ready) < p.keepMax()
	if keep {
		p.ready = append(p.ready, sb)
	}
	return keep
}

// ids are the ids of the sandboxes in the pool.
func (p *pool) ids() map[string]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]bool, len(p.ready))
	for _, sb := range p.ready {
		out[sb.meta.ID] = true
	}
	return out
}

// len is how many sandboxes are ready.
func (p *pool) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready)
}

// close stops building and keeping sandboxes; the ones ready stay for
// drain.
func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	stop, done := p.stop, p.done
	p.stop = nil
	p.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}

// drain empties the pool and returns what it held.
func (p *pool) drain() []*sandbox {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.ready
	p.ready = nil
	return out
}
