package runner

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/envplugin"
)

// lentSandbox is the Sandbox an episode's environment sees. It is bound to
// one sandbox id, applies the block's default exec timeout, and counts what happened for the trajectory's metrics.
type lentSandbox struct {
	backend Backend
	id      string
	timeout time.Duration

	execs    atomic.Int64
	timeouts atomic.Int64
	execNS   atomic.Int64
}

var _ envplugin.Sandbox = (*lentSandbox)(nil)

func (s *lentSandbox) ID() string { return s.id }

func (s *lentSandbox) Exec(ctx context.Context, req core.ExecRequest) (core.ExecResult, error) {
	if req.Timeout == 0 {
		req.Timeout = s.timeout
	}
	start := time.Now()
	res, err := s.backend.Exec(ctx, s.id, req)
	s.execNS.Add(int64(time.Since(start)))
	s.execs.Add(1)
	if res.TimedOut {
		s.timeouts.Add(1)
	}
	return res, err
}

func (s *lentSandbox) ReadFile(ctx context.Context, path string, maxBytes int64) ([]byte, error) {
	return s.backend.ReadFile(ctx, s.id, path, maxBytes)
}

func (s *lentSandbox) WriteFile(ctx context.Context, path string, data []byte, mode uint32) error {
	return s.backend.WriteFile(ctx, s.id, path, data, mode)
}

func (s *lentSandbox) ListFiles(ctx context.Context, path string) ([]core.FileInfo, error) {
	return s.backend.ListFiles(ctx, s.id, path)
}
