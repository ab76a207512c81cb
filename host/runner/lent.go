package runner

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/envplugin"
	"github.com/rlhost/rlhost/core/sandboxplugin"
)

// lentSandbox is the Sandbox an episode's environment sees: a
// sandboxplugin.Bound (one sandbox id, the block's exec timeout) that
// also counts what happened for the trajectory's metrics.
type lentSandbox struct {
	sandboxplugin.Bound

	execs    atomic.Int64
	timeouts atomic.Int64
	execNS   atomic.Int64
}

var _ envplugin.Sandbox = (*lentSandbox)(nil)

func (s *lentSandbox) Exec(ctx context.Context, req core.ExecRequest) (core.ExecResult, error) {
	start := time.Now()
	res, err := s.Bound.Exec(ctx, req)
	s.execNS.Add(int64(time.Since(start)))
	s.execs.Add(1)
	if res.TimedOut {
		s.timeouts.Add(1)
	}
	return res, err
}
