package runner

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/envplugin"
	"github.com/rlhost/rlhost/host/pluginmgr"
)

// lentSandbox is the Sandbox an episode's environment sees. It is bound to
// one sandbox id, applies the block's default exec timeout, fetches the
// backend client per call (so a restarted backend plugin is picked up), and
// counts what happened for the trajectory's metrics.
type lentSandbox struct {
	backend *pluginmgr.Instance
	id      string
	timeout time.Duration

	execs    atomic.Int64
	timeouts atomic.Int64
	execNS   atomic.Int64
}

var _ envplugin.Sandbox = (*lentSandbox)(nil)

func (s *lentSandbox) ID() string { return s.id }

func (s *lentSandbox) Exec(ctx context.Context, req core.ExecRequest) (core.ExecResult, error) {
	b, err := s.backend.Backend(ctx)
	if err != nil {
		return core.ExecResult{}, err
	}
	if req.Timeout == 0 {
		req.Timeout = s.timeout
	}
	start := time.Now()
	res, err := b.Exec(ctx, s.id, req)
	s.execNS.Add(int64(time.Since(start)))
	s.execs.Add(1)
	if res.TimedOut {
		s.timeouts.Add(1)
	}
	return res, s.backend.Crashed(err)
}

func (s *lentSandbox) ReadFile(ctx context.Context, path string, maxBytes int64) ([]byte, error) {
	b, err := s.backend.Backend(ctx)
	if err != nil {
		return nil, err
	}
	data, err := b.ReadFile(ctx, s.id, path, maxBytes)
	return data, s.backend.Crashed(err)
}

func (s *lentSandbox) WriteFile(ctx context.Context, path string, data []byte, mode uint32) error {
	b, err := s.backend.Backend(ctx)
	if err != nil {
		return err
	}
	return s.backend.Crashed(b.WriteFile(ctx, s.id, path, data, mode))
}

func (s *lentSandbox) ListFiles(ctx context.Context, path string) ([]core.FileInfo, error) {
	b, err := s.backend.Backend(ctx)
	if err != nil {
		return nil, err
	}
	fs, err := b.ListFiles(ctx, s.id, path)
	return fs, s.backend.Crashed(err)
}
