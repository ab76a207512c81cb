// Package inflight is the gate a backend's calls pass through so that its
// Shutdown can close the door, cancel the calls still running and wait for
// them before it cleans up: a Create that was in flight when Shutdown began
// then cannot leave a sandbox behind that Shutdown never saw.
//
// It only tracks calls; what Shutdown deletes is the backend's business.
package inflight

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/rlhost/rlhost/core"
)

// ErrClosed is the error of a call that comes after Close; it wraps
// core.ErrUnavailable, which keeps its identity across the plugin boundary.
var ErrClosed = fmt.Errorf("shut down: %w", core.ErrUnavailable)

// Gate counts the calls in progress. The zero Gate is not usable; use New.
type Gate struct {
	mu     sync.Mutex
	closed bool
	calls  sync.WaitGroup
	life   context.Context
	end    context.CancelFunc
}

// New returns an open Gate.
func New() *Gate {
	life, end := context.WithCancel(context.Background())
	return &Gate{life: life, end: end}
}

// Enter admits a call: its context also ends when Close begins, and done
// must be called when the call returns. After Close it returns ErrClosed.
func (g *Gate) Enter(ctx context.Context) (context.Context, func(), error) {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil, nil, ErrClosed
	}
	g.calls.Add(1)
	g.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(g.life, cancel)
	return ctx, func() { stop(); cancel(); g.calls.Done() }, nil
}

// Closed says whether Close has begun.
func (g *Gate) Closed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

// Close refuses new calls, cancels the ones in progress and waits until
// they return or ctx ends. Only the first Close does this and reports
// true; later ones return false at once. The error is ctx's when it ended
// first, with calls still running.
func (g *Gate) Close(ctx context.Context) (first bool, err error) {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return false, nil
	}
	g.closed = true
	g.mu.Unlock()
	g.end()
	waited := make(chan struct{})
	go func() { g.calls.Wait(); close(waited) }()
	select {
	case <-waited:
		return true, nil
	case <-ctx.Done():
		return true, fmt.Errorf("calls still running: %w", ctx.Err())
	}
}

// IsClosed says whether err comes from a closed Gate.
func IsClosed(err error) bool { return errors.Is(err, ErrClosed) }
