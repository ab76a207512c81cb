package sandboxplugin

import (
	"context"
	"time"

	"github.com/rlhost/rlhost/core"
)

// SandboxOps are a backend's calls on one existing sandbox.
type SandboxOps interface {
	Exec(ctx context.Context, id string, req core.ExecRequest) (core.ExecResult, error)
	ReadFile(ctx context.Context, id, path string, maxBytes int64) ([]byte, error)
	WriteFile(ctx context.Context, id, path string, data []byte, mode uint32) error
	ListFiles(ctx context.Context, id, path string) ([]core.FileInfo, error)
}

// Bound is one sandbox of a backend as an environment sees it (it
// satisfies envplugin.Sandbox): bound to one id, with the sandbox block's
// timeout put into every exec request that names none. This is the one
// place that timeout is applied; the host lends a Bound to each episode,
// and test harnesses use the same type.
type Bound struct {
	Backend        SandboxOps
	SandboxID      string
	DefaultTimeout time.Duration // the sandbox block's timeout
}

// ID returns the bound sandbox id.
func (s *Bound) ID() string { return s.SandboxID }

// Exec runs a command in the bound sandbox.
func (s *Bound) Exec(ctx context.Context, req core.ExecRequest) (core.ExecResult, error) {
	if req.Timeout == 0 {
		req.Timeout = s.DefaultTimeout
	}
	return s.Backend.Exec(ctx, s.SandboxID, req)
}

// ReadFile reads from the bound sandbox.
func (s *Bound) ReadFile(ctx context.Context, path string, maxBytes int64) ([]byte, error) {
	return s.Backend.ReadFile(ctx, s.SandboxID, path, maxBytes)
}

// WriteFile writes into the bound sandbox.
func (s *Bound) WriteFile(ctx context.Context, path string, data []byte, mode uint32) error {
	return s.Backend.WriteFile(ctx, s.SandboxID, path, data, mode)
}

// ListFiles lists a directory of the bound sandbox.
func (s *Bound) ListFiles(ctx context.Context, path string) ([]core.FileInfo, error) {
	return s.Backend.ListFiles(ctx, s.SandboxID, path)
}
