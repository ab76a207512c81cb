package lendwire

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
	rlhostpb "github.com/rlhost/rlhost/core/proto"
)

// waitReading waits until some caller of c holds the turn to read; the
// deadline only stops a hung test.
func waitReading(t *testing.T, c *Client, pending int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		c.mu.Lock()
		ok := c.reading && len(c.pending) == pending
		c.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no caller took the turn to read")
		}
	}
}

// A caller that gives up while it reads, with half of another call's reply
// read, passes the reading on: the other call gets its whole reply, and
// the host is told of the cancel.
func TestGivingUpMidFramePassesTheReading(t *testing.T) {
	mine, peer := net.Pipe() // synchronous: a write returns once read
	defer peer.Close()
	c := NewClient(mine)
	defer c.Close()

	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	errA := make(chan error, 1)
	go func() {
		_, err := c.Call(ctxA, info("a"))
		errA <- err
	}()
	var callA rlhostpb.LentCall
	if err := ReadFrame(peer, &callA); err != nil {
		t.Fatal(err)
	}
	waitReading(t, c, 1) // A, alone, reads

	type result struct {
		rep *rlhostpb.LentReply
		err error
	}
	resB := make(chan result, 1)
	go func() {
		rep, err := c.Call(context.Background(), info("b"))
		resB <- result{rep, err}
	}()
	var callB rlhostpb.LentCall
	if err := ReadFrame(peer, &callB); err != nil {
		t.Fatal(err)
	}
	rep := echo(context.Background(), &callB)
	rep.Id = callB.GetId()
	frame, err := EncodeFrame(rep)
	if err != nil {
		t.Fatal(err)
	}
	half := len(frame) / 2
	if _, err := peer.Write(frame[:half]); err != nil { // read by A
		t.Fatal(err)
	}
	cancelA()
	var cancel rlhostpb.LentCall
	if err := ReadFrame(peer, &cancel); err != nil {
		t.Fatal(err)
	}
	if !cancel.IsCancel() || cancel.GetId() != callA.GetId() {
		t.Fatalf("after A gave up the host got %v, want a cancel of call %d", &cancel, callA.GetId())
	}
	if err := <-errA; !errors.Is(err, context.Canceled) {
		t.Fatalf("A got %v, want cancelled", err)
	}
	if _, err := peer.Write(frame[half:]); err != nil { // read by B
		t.Fatal(err)
	}
	got := <-resB
	if got.err != nil || got.rep.GetInfo().GetId() != "b" {
		t.Fatalf("B got %v, %v; want its own reply", got.rep, got.err)
	}
	// A peer that is gone is seen by the next call.
	peer.Close()
	if _, err := c.Call(context.Background(), info("c")); !errors.Is(err, core.ErrUnavailable) {
		t.Fatalf("call after the peer closed: %v, want unavailable", err)
	}
	if !c.Broken() {
		t.Fatal("connection not broken after a call saw the peer gone")
	}
}

// Many callers on one connection, some giving up at random moments, each
// get their own reply or their own cancellation, never another's.
func TestManyCallersShareTheReading(t *testing.T) {
	s := serve(t, func(ctx context.Context, c *rlhostpb.LentCall) *rlhostpb.LentReply {
		select {
		case <-time.After(time.Duration(rand.IntN(300)) * time.Microsecond):
		case <-ctx.Done():
			return failWith(ctx.Err())
		}
		return echo(ctx, c)
	})
	c := dial(t, s.sock)
	const callers, calls = 16, 40
	var wg sync.WaitGroup
	errs := make(chan error, callers*calls)
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				id := fmt.Sprintf("%d/%d", g, i)
				ctx, cancel := context.WithCancel(context.Background())
				if i%3 == 0 {
					time.AfterFunc(time.Duration(rand.IntN(300))*time.Microsecond, cancel)
				}
				rep, err := c.Call(ctx, info(id))
				gaveUp := ctx.Err() != nil
				cancel()
				switch {
				case err == nil && rep.GetInfo().GetId() != id:
					errs <- fmt.Errorf("call %s got the reply of %s", id, rep.GetInfo().GetId())
				case err != nil && !(gaveUp && errors.Is(err, context.Canceled)):
					errs <- fmt.Errorf("call %s: %w", id, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// The connection is whole after all that: no caller left a partial
	// frame behind or a turn unpassed.
	if rep, err := c.Call(context.Background(), info("last")); err != nil || rep.GetInfo().GetId() != "last" {
		t.Fatalf("after the storm: %v, %v", rep, err)
	}
}
