package pluginmgr

import (
	"context"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/sdk/envplugin"
	"github.com/rlhost/rlhost/core/sdk/wire/lend"
)

// LiveEnv is an environment client that always calls the current plugin
// process, so a restart is picked up without the caller noticing, and that
// marks every error coming from a dead process with ErrPluginExited. Callers
// depend on its methods, never on the Instance behind it.
type LiveEnv struct{ in *Instance }

// LiveEnv returns the environment view of this instance.
func (in *Instance) LiveEnv() LiveEnv { return LiveEnv{in: in} }

// Tasks lists the environment's tasks.
func (e LiveEnv) Tasks(ctx context.Context) ([]core.Task, error) {
	c, err := e.in.Env(ctx)
	if err != nil {
		return nil, err
	}
	tasks, err := c.Tasks(ctx)
	return tasks, e.in.Crashed(err)
}

// NewEpisode starts an episode; its session reports crashes the same way.
func (e LiveEnv) NewEpisode(ctx context.Context, ep envplugin.Episode) (envplugin.Session, envplugin.Observation, error) {
	c, err := e.in.Env(ctx)
	if err != nil {
		return nil, envplugin.Observation{}, err
	}
	sess, obs, err := c.NewEpisode(ctx, ep)
	if err != nil {
		return nil, obs, e.in.Crashed(err)
	}
	return liveSession{s: sess, in: e.in}, obs, nil
}

type liveSession struct {
	s  envplugin.Session
	in *Instance
}

func (l liveSession) Step(ctx context.Context, reply core.Message) (envplugin.Observation, error) {
	obs, err := l.s.Step(ctx, reply)
	return obs, l.in.Crashed(err)
}

func (l liveSession) End(ctx context.Context, reason string) (envplugin.Observation, error) {
	obs, err := l.s.End(ctx, reason)
	return obs, l.in.Crashed(err)
}

// LiveBackend is the sandbox-backend counterpart of LiveEnv.
type LiveBackend struct{ in *Instance }

var _ lend.Lender = LiveBackend{}

// LiveBackend returns the sandbox backend view of this instance.
func (in *Instance) LiveBackend() LiveBackend { return LiveBackend{in: in} }

// Create makes a sandbox.
func (b LiveBackend) Create(ctx context.Context, spec core.SandboxSpec) (core.SandboxInfo, error) {
	c, err := b.in.Backend(ctx)
	if err != nil {
		return core.SandboxInfo{}, err
	}
	info, err := c.Create(ctx, spec)
	return info, b.in.Crashed(err)
}

// CreateLent makes a sandbox the plugin lends itself, when it can.
func (b LiveBackend) CreateLent(ctx context.Context, spec core.SandboxSpec, defaultTimeout time.Duration) (core.SandboxInfo, lend.Lease, error) {
	c, err := b.in.Backend(ctx)
	if err != nil {
		return core.SandboxInfo{}, lend.Lease{}, err
	}
	info, ls, err := c.CreateLent(ctx, spec, defaultTimeout)
	return info, ls, b.in.Crashed(err)
}

// DestroyLent removes sandbox id and returns what was done through its
// lease.
func (b LiveBackend) DestroyLent(ctx context.Context, id string) (lend.Usage, error) {
	c, err := b.in.Backend(ctx)
	if err != nil {
		return lend.Usage{}, err
	}
	use, err := c.DestroyLent(ctx, id)
	return use, b.in.Crashed(err)
}

// Exec runs a command in sandbox id.
func (b LiveBackend) Exec(ctx context.Context, id string, req core.ExecRequest) (core.ExecResult, error) {
	c, err := b.in.Backend(ctx)
	if err != nil {
		return core.ExecResult{}, err
	}
	res, err := c.Exec(ctx, id, req)
	return res, b.in.Crashed(err)
}

// ReadFile reads a file of sandbox id.
func (b LiveBackend) ReadFile(ctx context.Context, id, path string, maxBytes int64) ([]byte, error) {
	c, err := b.in.Backend(ctx)
	if err != nil {
		return nil, err
	}
	data, err := c.ReadFile(ctx, id, path, maxBytes)
	return data, b.in.Crashed(err)
}

// WriteFile writes a file into sandbox id.
func (b LiveBackend) WriteFile(ctx context.Context, id, path string, data []byte, mode uint32) error {
	c, err := b.in.Backend(ctx)
	if err != nil {
		return err
	}
	return b.in.Crashed(c.WriteFile(ctx, id, path, data, mode))
}

// ListFiles lists a directory of sandbox id.
func (b LiveBackend) ListFiles(ctx context.Context, id, path string) ([]core.FileInfo, error) {
	c, err := b.in.Backend(ctx)
	if err != nil {
		return nil, err
	}
	fs, err := c.ListFiles(ctx, id, path)
	return fs, b.in.Crashed(err)
}

// Destroy removes sandbox id.
func (b LiveBackend) Destroy(ctx context.Context, id string) error {
	c, err := b.in.Backend(ctx)
	if err != nil {
		return err
	}
	return b.in.Crashed(c.Destroy(ctx, id))
}
