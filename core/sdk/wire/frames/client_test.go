package frames

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/sdk/wire/rlhostpb"
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

// readCall reads one call from the peer end of a client's connection.
func readCall(t *testing.T, peer net.Conn) *rlhostpb.LentCall {
	t.Helper()
	var call rlhostpb.LentCall
	if err := Read(peer, &call); err != nil {
		t.Fatal(err)
	}
	return &call
}

// echoFrame is the frame that answers call as echo does.
func echoFrame(t *testing.T, call *rlhostpb.LentCall) []byte {
	t.Helper()
	rep := echo(context.Background(), call)
	rep.Id = call.GetId()
	frame, err := Encode(rep)
	if err != nil {
		t.Fatal(err)
	}
	return frame
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
	callA := readCall(t, peer)
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
	frame := echoFrame(t, readCall(t, peer))
	half := len(frame) / 2
	if _, err := peer.Write(frame[:half]); err != nil { // read by A
		t.Fatal(err)
	}
	cancelA()
	if cancel := readCall(t, peer); !cancel.IsCancel() || cancel.GetId() != callA.GetId() {
		t.Fatalf("after A gave up the host got %v, want a cancel of call %d", cancel, callA.GetId())
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
	cases := []struct {
		name     string
		maxDelay time.Duration // the handler's answer comes after up to this
		calls    int           // per caller
	}{
		{"answers at once", 0, 400},
		{"answers within 300µs", 300 * time.Microsecond, 40},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := serve(t, func(ctx context.Context, c *rlhostpb.LentCall) *rlhostpb.LentReply {
				if tc.maxDelay > 0 {
					select {
					case <-time.After(rand.N(tc.maxDelay)):
					case <-ctx.Done():
						return failWith(ctx.Err())
					}
				}
				return echo(ctx, c)
			})
			c := dial(t, s.sock)
			const callers = 16
			var wg sync.WaitGroup
			errs := make(chan error, callers*tc.calls)
			for g := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range tc.calls {
						id := fmt.Sprintf("%d/%d", g, i)
						// A hang fails as a deadline; the bound only ends it.
						ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
						if i%3 == 0 {
							time.AfterFunc(rand.N(300*time.Microsecond), cancel)
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
			// The connection is whole after all that: no caller left a
			// partial frame behind or a turn unpassed.
			if rep, err := c.Call(context.Background(), info("last")); err != nil || rep.GetInfo().GetId() != "last" {
				t.Fatalf("after the storm: %v, %v", rep, err)
			}
		})
	}
}

// A call whose reply was read, by a caller whose turn then ended, before
// the call bid for the turn does not take it: the turn would go unused and
// no one would read again.
func TestReplyBeforeTheBidLeavesTheTurnFree(t *testing.T) {
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	mine, err := net.Dial("unix", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	c := NewClient(mine)
	defer c.Close()
	release := make(chan struct{})
	c.sent = func(id uint64) {
		if id == 2 {
			<-release
		}
	}
	answer := func(call *rlhostpb.LentCall) {
		if _, err := peer.Write(echoFrame(t, call)); err != nil {
			t.Fatal(err)
		}
	}
	// A hang is the failure; the bound only ends the test.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	call := func(id string, out chan<- error) {
		rep, err := c.Call(ctx, info(id))
		if err == nil && rep.GetInfo().GetId() != id {
			err = fmt.Errorf("%s got the reply of %s", id, rep.GetInfo().GetId())
		}
		out <- err
	}
	errA, errW, errC := make(chan error, 1), make(chan error, 1), make(chan error, 1)
	go call("a", errA)
	a := readCall(t, peer)
	waitReading(t, c, 1) // A reads
	go call("w", errW)
	w := readCall(t, peer) // W is sent, and held before its bid
	answer(w)              // A reads W's reply and hands it over,
	answer(a)              // then its own, and its turn ends
	if err := <-errA; err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-errW; err != nil {
		t.Fatal(err)
	}
	go call("c", errC)
	answer(readCall(t, peer))
	if err := <-errC; err != nil {
		t.Fatalf("a call after W: %v (no one read its reply)", err)
	}
}
