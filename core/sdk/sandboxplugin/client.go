package sandboxplugin

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/core/sdk/pluginbase"
	"github.com/rlhost/rlhost/core/sdk/wire/frames"
	"github.com/rlhost/rlhost/core/sdk/wire/lend"
	"github.com/rlhost/rlhost/core/sdk/wire/rlhostpb"
)

// Client is the host-side Backend that talks to a plugin over gRPC.
type Client struct {
	rpc  rlhostpb.SandboxBackendClient
	info pluginbase.Info

	// life ends with the plugin process (nil: not watched); the lent-sandbox
	// socket it named is removed then, in case it was killed.
	life  context.Context
	mu    sync.Mutex
	socks map[string]bool
}

var (
	_ Backend     = (*Client)(nil)
	_ lend.Lender = (*Client)(nil)
)

// describeTimeout bounds the Describe call made when a client is dispensed,
// so a wedged plugin fails the start instead of hanging the host.
const describeTimeout = 10 * time.Second

// NewClient wraps a gRPC connection and fetches the plugin's Info once.
func NewClient(ctx context.Context, rpc rlhostpb.SandboxBackendClient) (*Client, error) {
	ctx, cancel := context.WithTimeout(ctx, describeTimeout)
	defer cancel()
	p, err := rpc.Describe(ctx, &rlhostpb.Empty{})
	if err != nil {
		return nil, fmt.Errorf("describe sandbox plugin: %w", rlhostpb.FromStatus(err))
	}
	info, err := rlhostpb.ToInfo(p)
	if err != nil {
		return nil, fmt.Errorf("decode sandbox plugin info: %w", err)
	}
	if info.Kind != "" && info.Kind != pluginbase.KindSandbox {
		return nil, fmt.Errorf("plugin %q is a %s plugin, not a sandbox backend", info.Name, info.Kind)
	}
	return &Client{rpc: rpc, info: info}, nil
}

// Info returns the description fetched when the client was made.
func (c *Client) Info() pluginbase.Info { return c.info }

// Configure sends the decoded config and the block's sandbox spec.
func (c *Client) Configure(ctx context.Context, cfg schema.Config, spec core.SandboxSpec) schema.Diagnostics {
	req := rlhostpb.FromConfig(cfg)
	req.SandboxSpec = fromSpec(spec)
	resp, err := c.rpc.Configure(ctx, req)
	if err != nil {
		return schema.Diagnostics{{Severity: schema.Error, Summary: "plugin failed to configure", Detail: rlhostpb.FromStatus(err).Error()}}
	}
	return rlhostpb.ToDiagnostics(resp)
}

// Create makes a sandbox.
func (c *Client) Create(ctx context.Context, spec core.SandboxSpec) (core.SandboxInfo, error) {
	info, _, err := c.create(ctx, &rlhostpb.CreateRequest{Spec: fromSpec(spec)})
	return info, err
}

// CreateLent makes a sandbox the plugin lends itself, when it can (a
// plugin built on an older SDK answers the zero Lease).
func (c *Client) CreateLent(ctx context.Context, spec core.SandboxSpec, defaultTimeout time.Duration) (core.SandboxInfo, lend.Lease, error) {
	return c.create(ctx, &rlhostpb.CreateRequest{Spec: fromSpec(spec), Lend: fromLendTimeout(defaultTimeout)})
}

func (c *Client) create(ctx context.Context, req *rlhostpb.CreateRequest) (core.SandboxInfo, lend.Lease, error) {
	r, err := c.rpc.Create(ctx, req)
	if err != nil {
		return core.SandboxInfo{}, lend.Lease{}, fmt.Errorf("create sandbox: %w", rlhostpb.FromStatus(err))
	}
	ls := toLease(r.GetLease())
	if ls.Socket != "" {
		c.watchSocket(ls.Socket)
	}
	return toSandboxInfo(r), ls, nil
}

// watchSocket removes the plugin's lent-sandbox socket once the plugin is
// gone.
func (c *Client) watchSocket(path string) {
	if c.life == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.socks[path] {
		return
	}
	if c.socks == nil {
		c.socks = map[string]bool{}
	}
	c.socks[path] = true
	context.AfterFunc(c.life, func() { frames.RemoveSocket(path) })
}

// Exec runs a command in sandbox id.
func (c *Client) Exec(ctx context.Context, id string, req core.ExecRequest) (core.ExecResult, error) {
	r, err := c.rpc.Exec(ctx, rlhostpb.FromExecRequest(id, req))
	if err != nil {
		return core.ExecResult{}, fmt.Errorf("exec in sandbox %s: %w", id, rlhostpb.FromStatus(err))
	}
	return rlhostpb.ToExecResult(r), nil
}

// ReadFile reads a file from sandbox id.
func (c *Client) ReadFile(ctx context.Context, id, path string, maxBytes int64) ([]byte, error) {
	r, err := c.rpc.ReadFile(ctx, &rlhostpb.ReadFileRequest{SandboxId: id, Path: []byte(path), MaxBytes: maxBytes})
	if err != nil {
		return nil, fmt.Errorf("read %s in sandbox %s: %w", path, id, rlhostpb.FromStatus(err))
	}
	return r.GetData(), nil
}

// WriteFile writes a file into sandbox id.
func (c *Client) WriteFile(ctx context.Context, id, path string, data []byte, mode uint32) error {
	_, err := c.rpc.WriteFile(ctx, &rlhostpb.WriteFileRequest{SandboxId: id, Path: []byte(path), Data: data, Mode: mode})
	if err != nil {
		return fmt.Errorf("write %s in sandbox %s: %w", path, id, rlhostpb.FromStatus(err))
	}
	return nil
}

// ListFiles lists a directory in sandbox id.
func (c *Client) ListFiles(ctx context.Context, id, path string) ([]core.FileInfo, error) {
	r, err := c.rpc.ListFiles(ctx, &rlhostpb.ListFilesRequest{SandboxId: id, Path: []byte(path)})
	if err != nil {
		return nil, fmt.Errorf("list %s in sandbox %s: %w", path, id, rlhostpb.FromStatus(err))
	}
	return rlhostpb.ToFiles(r), nil
}

// Destroy removes sandbox id.
func (c *Client) Destroy(ctx context.Context, id string) error {
	_, err := c.DestroyLent(ctx, id)
	return err
}

// DestroyLent removes sandbox id, and returns what was done through its
// lease (zero when it had none).
func (c *Client) DestroyLent(ctx context.Context, id string) (lend.Usage, error) {
	r, err := c.rpc.Destroy(ctx, &rlhostpb.SandboxID{Id: id})
	if err != nil {
		return lend.Usage{}, fmt.Errorf("destroy sandbox %s: %w", id, rlhostpb.FromStatus(err))
	}
	return toUsage(r.GetLeaseUse()), nil
}

// List returns sandboxes matching labels.
func (c *Client) List(ctx context.Context, labels map[string]string) ([]core.SandboxInfo, error) {
	r, err := c.rpc.List(ctx, &rlhostpb.ListRequest{Labels: labels})
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", rlhostpb.FromStatus(err))
	}
	return toSandboxInfos(r), nil
}

// ReapOrphans removes sandboxes whose owner is gone.
func (c *Client) ReapOrphans(ctx context.Context) ([]core.SandboxInfo, error) {
	r, err := c.rpc.ReapOrphans(ctx, &rlhostpb.Empty{})
	if err != nil {
		return nil, fmt.Errorf("reap orphan sandboxes: %w", rlhostpb.FromStatus(err))
	}
	return toSandboxInfos(r), nil
}

// Shutdown asks the plugin to destroy its sandboxes before it is killed.
func (c *Client) Shutdown(ctx context.Context) error {
	if _, err := c.rpc.Shutdown(ctx, &rlhostpb.Empty{}); err != nil {
		return fmt.Errorf("shut down sandbox plugin: %w", rlhostpb.FromStatus(err))
	}
	return nil
}
