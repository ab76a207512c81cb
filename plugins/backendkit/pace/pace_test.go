package pace

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestPacerSpacesCalls(t *testing.T) {
	tests := []struct {
		name  string
		rate  float64
		calls int
		least time.Duration // the last call cannot come sooner
	}{
		{"unpaced", 0, 50, 0},
		{"100 per second", 100, 5, 40 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewPacer(tt.rate)
			start := time.Now()
			var wg sync.WaitGroup
			for range tt.calls {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := p.Wait(context.Background()); err != nil {
						t.Error(err)
					}
				}()
			}
			wg.Wait()
			// A lower bound only: spacing can make calls late, never early.
			if el := time.Since(start); el < tt.least {
				t.Errorf("%d calls at %v/s took %v, less than %v", tt.calls, tt.rate, el, tt.least)
			}
		})
	}
}

func TestPacerWaitEndsWithContext(t *testing.T) {
	p := NewPacer(0.001) // one call per 1000 s
	if err := p.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("second Wait: %v, want context.Canceled", err)
	}
	var nilPacer *Pacer
	if err := nilPacer.Wait(context.Background()); err != nil {
		t.Errorf("nil Pacer: %v", err)
	}
}

func TestCap(t *testing.T) {
	c := NewCap(2)
	if !c.TryTake() || !c.TryTake() {
		t.Fatal("two slots of two not taken")
	}
	if c.TryTake() {
		t.Fatal("a third slot was taken")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Take(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Take on a full cap with a dead context: %v", err)
	}
	got := make(chan error)
	go func() { got <- c.Take(context.Background()) }()
	c.Put()
	if err := <-got; err != nil {
		t.Fatalf("Take after Put: %v", err)
	}
	if c.InUse() != 2 {
		t.Errorf("InUse = %d, want 2", c.InUse())
	}
	c.Put()
	c.Put()
	if c.InUse() != 0 {
		t.Errorf("InUse = %d, want 0", c.InUse())
	}
	u := NewCap(0)
	for range 100 {
		if !u.TryTake() {
			t.Fatal("an unlimited cap refused")
		}
	}
	if u.InUse() != 100 {
		t.Errorf("unlimited InUse = %d", u.InUse())
	}
}
