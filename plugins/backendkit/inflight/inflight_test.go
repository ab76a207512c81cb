package inflight

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
)

func TestCloseCancelsAndWaits(t *testing.T) {
	g := New()
	ctx, done, err := g.Enter(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	returned := make(chan struct{})
	go func() {
		<-ctx.Done() // a call that runs until cancelled
		close(returned)
		done()
	}()
	first, err := g.Close(context.Background())
	if !first || err != nil {
		t.Fatalf("Close = %v, %v", first, err)
	}
	select {
	case <-returned:
	default:
		t.Fatal("Close returned before the call it cancelled")
	}
	if first, err := g.Close(context.Background()); first || err != nil {
		t.Errorf("second Close = %v, %v", first, err)
	}
	if _, _, err := g.Enter(context.Background()); !IsClosed(err) || !errors.Is(err, core.ErrUnavailable) {
		t.Errorf("Enter after Close: %v", err)
	}
	if !g.Closed() {
		t.Error("Closed is false after Close")
	}
}

func TestCloseGivesUpWithItsContext(t *testing.T) {
	g := New()
	_, done, err := g.Enter(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	// The call ignores its cancellation; Close stops waiting when ctx ends.
	if first, err := g.Close(ctx); !first || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close = %v, %v; want true, DeadlineExceeded", first, err)
	}
}

func TestEnterContextEndsWithCaller(t *testing.T) {
	g := New()
	parent, cancel := context.WithCancel(context.Background())
	ctx, done, err := g.Enter(parent)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	cancel()
	<-ctx.Done()
	if g.Closed() {
		t.Error("a caller's cancellation closed the gate")
	}
}
