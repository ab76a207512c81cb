package core

import (
	"testing"
	"time"
)

// A request that names no timeout runs under DefaultExecTimeout; one that
// names its own keeps it.
func TestTimeoutOrDefault(t *testing.T) {
	for _, tc := range []struct {
		timeout, want time.Duration
	}{
		{0, DefaultExecTimeout},
		{-time.Second, DefaultExecTimeout},
		{time.Millisecond, time.Millisecond},
		{time.Hour, time.Hour},
	} {
		if got := (ExecRequest{Timeout: tc.timeout}).TimeoutOrDefault(); got != tc.want {
			t.Errorf("Timeout %v: got %v, want %v", tc.timeout, got, tc.want)
		}
	}
}
