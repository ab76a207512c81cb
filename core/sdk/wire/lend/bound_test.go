package lend

import (
	"context"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
)

// timeoutEcho is a backend whose every exec reports the timeout it was
// given, in its stdout.
type timeoutEcho struct{}

func (timeoutEcho) Exec(_ context.Context, id string, req core.ExecRequest) (core.ExecResult, error) {
	return core.ExecResult{Stdout: id + " " + req.Timeout.String()}, nil
}
func (timeoutEcho) ReadFile(context.Context, string, string, int64) ([]byte, error) { return nil, nil }
func (timeoutEcho) WriteFile(context.Context, string, string, []byte, uint32) error { return nil }
func (timeoutEcho) ListFiles(context.Context, string, string) ([]core.FileInfo, error) {
	return nil, nil
}

// The precedence of exec timeouts: the request's own, else the block's.
func TestBoundTimeoutPrecedence(t *testing.T) {
	b := &Bound{Backend: timeoutEcho{}, SandboxID: "sb", DefaultTimeout: 30 * time.Second}
	for req, want := range map[time.Duration]string{0: "sb 30s", time.Second: "sb 1s", time.Hour: "sb 1h0m0s"} {
		res, err := b.Exec(context.Background(), core.ExecRequest{Command: []string{"true"}, Timeout: req})
		if err != nil || res.Stdout != want {
			t.Errorf("request timeout %v: backend saw %q, %v; want %q", req, res.Stdout, err, want)
		}
	}
}
