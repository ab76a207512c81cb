// Package fakelatency gives the wire-level fakes of cloud sandbox services
// (fakedaytona, fakeaviato) the latencies of the real ones: each kind of
// call waits a base time plus a random jitter, drawn from a seeded source
// so that a simulation can be repeated. A simulated cluster on loopback
// then makes its clients wait as a remote one would.
//
// It deliberately models only waiting, not failures, rate limits or
// queueing at the service; the fakes have their own knobs for those.
package fakelatency

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/rlhost/rlhost/core/duration"
)

// Dist is the distribution of a latency's random part.
type Dist string

const (
	// Uniform jitter is uniform in [0, Jitter).
	Uniform Dist = "uniform"
	// Exponential jitter has mean Jitter: most calls are quick, a few
	// are several times slower, as with a shared service.
	Exponential Dist = "exp"
)

// Latency is how long one kind of call takes: Base plus a random Jitter.
// The zero value takes no time.
type Latency struct {
	Base   time.Duration
	Jitter time.Duration
	Dist   Dist // Uniform when empty
}

// Parse reads a latency as BASE, BASE+JITTER (uniform jitter) or
// BASE+DIST(JITTER) with DIST uniform or exp; durations are read as
// rlhost's settings read them. Examples: "300ms", "1s+500ms",
// "50ms+exp(20ms)".
func Parse(s string) (Latency, error) {
	base, jitter, hasJitter := strings.Cut(strings.TrimSpace(s), "+")
	var l Latency
	var err error
	if l.Base, err = duration.Parse(strings.TrimSpace(base)); err != nil {
		return Latency{}, fmt.Errorf("latency %q: base: %w", s, err)
	}
	if !hasJitter {
		return l, nil
	}
	jitter = strings.TrimSpace(jitter)
	l.Dist = Uniform
	if name, arg, ok := strings.Cut(jitter, "("); ok {
		if !strings.HasSuffix(arg, ")") {
			return Latency{}, fmt.Errorf("latency %q: jitter %q lacks its closing parenthesis", s, jitter)
		}
		switch d := Dist(strings.TrimSpace(name)); d {
		case Uniform, Exponential:
			l.Dist = d
		default:
			return Latency{}, fmt.Errorf("latency %q: unknown distribution %q (want %s or %s)", s, name, Uniform, Exponential)
		}
		jitter = strings.TrimSuffix(arg, ")")
	}
	if l.Jitter, err = duration.Parse(strings.TrimSpace(jitter)); err != nil {
		return Latency{}, fmt.Errorf("latency %q: jitter: %w", s, err)
	}
	return l, nil
}

// String is the latency in Parse's syntax.
func (l Latency) String() string {
	if l.Jitter == 0 {
		return l.Base.String()
	}
	d := l.Dist
	if d == "" {
		d = Uniform
	}
	return fmt.Sprintf("%s+%s(%s)", l.Base, d, l.Jitter)
}

// Mean is the latency's expected value.
func (l Latency) Mean() time.Duration {
	if l.Dist == Exponential {
		return l.Base + l.Jitter
	}
	return l.Base + l.Jitter/2
}

// Model is a service's latencies, one per kind of call.
type Model struct {
	Create Latency // until a new sandbox is running
	Exec   Latency // before a command starts
	Files  Latency // each file call
	Seed   uint64  // the seed of the random jitter
}

// Source draws latencies; it is safe for concurrent use.
type Source struct {
	mu  sync.Mutex
	rng *rand.Rand
}

// NewSource is a source seeded with seed.
func NewSource(seed uint64) *Source {
	return &Source{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Draw is one latency drawn from l.
func (s *Source) Draw(l Latency) time.Duration {
	if l.Jitter <= 0 {
		return l.Base
	}
	s.mu.Lock()
	u := s.rng.Float64()
	s.mu.Unlock()
	var f float64
	switch l.Dist {
	case Exponential:
		// Capped at 20 means, so one draw cannot stall a run.
		f = min(-math.Log1p(-u), 20)
	default:
		f = u
	}
	return l.Base + time.Duration(f*float64(l.Jitter))
}

// Wait waits one latency drawn from l, or until ctx is done.
func (s *Source) Wait(ctx context.Context, l Latency) error {
	d := s.Draw(l)
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
