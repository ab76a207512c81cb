package sandboxinit

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// Tracer logs stage durations to stderr when RLHOST_LOCAL_TRACE is set; it
// is nil (and free) otherwise. Both the backend and the init use it.
type Tracer struct {
	what  string
	start time.Time
	last  time.Time
	parts []string
}

func NewTracer(what string) *Tracer {
	if os.Getenv("RLHOST_LOCAL_TRACE") == "" {
		return nil
	}
	now := time.Now()
	return &Tracer{what: what, start: now, last: now}
}

func (t *Tracer) Mark(stage string) {
	if t == nil {
		return
	}
	now := time.Now()
	t.parts = append(t.parts, fmt.Sprintf("%s=%v", stage, now.Sub(t.last).Round(time.Microsecond)))
	t.last = now
}

func (t *Tracer) Done() {
	if t == nil {
		return
	}
	fmt.Fprintf(os.Stderr, "rlhost local trace: %s: %s total=%v\n", t.what, strings.Join(t.parts, " "), time.Since(t.start).Round(time.Microsecond))
}
