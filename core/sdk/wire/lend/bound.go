package lend

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/rlhost/rlhost/core"
)

// Bound is one sandbox of a backend as an environment is lent it: bound to
// its id, with the sandbox block's timeout put into every exec request
// that names none (the one place that timeout is applied), and its execs
// counted. The host lends a Bound to each episode, a backend lends one for
// each sandbox it lends itself, and test harnesses use the same type.
type Bound struct {
	Backend        core.SandboxOps
	SandboxID      string
	DefaultTimeout time.Duration // the sandbox block's timeout
	// BackendLease is the backend's lease of the sandbox when the backend
	// lends it itself (see Leased); zero when the host relays its calls.
	BackendLease Lease

	execs    atomic.Int64
	timeouts atomic.Int64
	execNS   atomic.Int64
}

var (
	_ core.Sandbox = (*Bound)(nil)
	_ Leased       = (*Bound)(nil)
)

// ID returns the bound sandbox id.
func (s *Bound) ID() string { return s.SandboxID }

// Lease is BackendLease.
func (s *Bound) Lease() Lease { return s.BackendLease }

// Exec runs a command in the bound sandbox and counts it.
func (s *Bound) Exec(ctx context.Context, req core.ExecRequest) (core.ExecResult, error) {
	if req.Timeout == 0 {
		req.Timeout = s.DefaultTimeout
	}
	start := time.Now()
	res, err := s.Backend.Exec(ctx, s.SandboxID, req)
	s.execNS.Add(int64(time.Since(start)))
	s.execs.Add(1)
	if res.TimedOut {
		s.timeouts.Add(1)
	}
	return res, err
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

// Usage is what the sandbox's execs have come to so far.
func (s *Bound) Usage() Usage {
	return Usage{Execs: s.execs.Load(), Timeouts: s.timeouts.Load(), ExecTime: time.Duration(s.execNS.Load())}
}

// Usage is what was done through one lent sandbox.
type Usage struct {
	Execs    int64         // exec calls answered
	Timeouts int64         // of them, commands killed by their timeout
	ExecTime time.Duration // their total time, from call to answer
}

// Add returns the sum of u and v.
func (u Usage) Add(v Usage) Usage {
	return Usage{Execs: u.Execs + v.Execs, Timeouts: u.Timeouts + v.Timeouts, ExecTime: u.ExecTime + v.ExecTime}
}
