// Package pace bounds how fast and how many: a Pacer spaces calls (a
// backend's create_rate), and a Cap counts what exists (max_sandboxes),
// taken when a create starts so that creates in flight count too.
//
// Both are in-process only; neither coordinates several processes sharing
// one account or machine.
package pace

import (
	"context"
	"sync"
	"time"

	"github.com/rlhost/rlhost/core/retry"
)

// Pacer lets calls through at most rate per second, across goroutines,
// first come first served. The zero Pacer, and one with rate <= 0, never
// waits.
type Pacer struct {
	mu       sync.Mutex
	interval time.Duration
	next     time.Time
}

// NewPacer returns a Pacer for rate calls per second.
func NewPacer(rate float64) *Pacer {
	p := &Pacer{}
	if rate > 0 {
		p.interval = time.Duration(float64(time.Second) / rate)
	}
	return p
}

// Wait blocks until the caller's turn, or until ctx ends. A caller whose
// ctx ends keeps its slot spent: the next caller does not move up.
func (p *Pacer) Wait(ctx context.Context) error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	if p.interval <= 0 {
		p.mu.Unlock()
		return nil
	}
	now := time.Now()
	at := p.next
	if at.Before(now) {
		at = now
	}
	p.next = at.Add(p.interval)
	p.mu.Unlock()
	return retry.Sleep(ctx, time.Until(at))
}

// Cap counts things against a hard limit. A Cap of limit <= 0 admits
// everything but still counts. Take a slot when a create starts and Put it
// back when the thing is gone (or its create failed).
type Cap struct {
	limit int
	mu    sync.Mutex
	used  int
	freed chan struct{} // closed and replaced on every Put, to wake waiters
}

// NewCap returns a Cap of limit slots.
func NewCap(limit int) *Cap { return &Cap{limit: limit, freed: make(chan struct{})} }

// Limit is the number of slots; <= 0 means unlimited.
func (c *Cap) Limit() int { return c.limit }

// InUse is the number of slots taken.
func (c *Cap) InUse() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.used
}

// TryTake takes a slot if one is free.
func (c *Cap) TryTake() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.limit > 0 && c.used >= c.limit {
		return false
	}
	c.used++
	return true
}

// Take waits for a free slot, or until ctx ends.
func (c *Cap) Take(ctx context.Context) error {
	for {
		c.mu.Lock()
		if c.limit <= 0 || c.used < c.limit {
			c.used++
			c.mu.Unlock()
			return nil
		}
		freed := c.freed
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-freed:
		}
	}
}

// Put returns a slot.
func (c *Cap) Put() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.used == 0 {
		panic("pace: Put without a Take")
	}
	c.used--
	close(c.freed)
	c.freed = make(chan struct{})
}
