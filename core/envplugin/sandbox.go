package envplugin

import (
	"context"
	"fmt"

	"github.com/rlhost/rlhost/core"
	rlhostpb "github.com/rlhost/rlhost/core/proto"
	"github.com/rlhost/rlhost/core/sandboxplugin"
)

// sandboxClient is the environment's view of a lent Sandbox: a gRPC client on
// the one broker connection to the host's Sandbox server, shared by all
// episodes. Every call names the sandbox, which is how the host routes it.
type sandboxClient struct {
	rpc rlhostpb.SandboxClient
	id  string
}

func (c *sandboxClient) ID() string { return c.id }

func (c *sandboxClient) Exec(ctx context.Context, req core.ExecRequest) (core.ExecResult, error) {
	r, err := c.rpc.Exec(ctx, sandboxplugin.FromExecRequest(c.id, req))
	if err != nil {
		return core.ExecResult{}, fmt.Errorf("exec in lent sandbox: %w", rlhostpb.FromStatus(err))
	}
	return sandboxplugin.ToExecResult(r), nil
}

func (c *sandboxClient) ReadFile(ctx context.Context, path string, maxBytes int64) ([]byte, error) {
	r, err := c.rpc.ReadFile(ctx, &rlhostpb.ReadFileRequest{SandboxId: c.id, Path: []byte(path), MaxBytes: maxBytes})
	if err != nil {
		return nil, fmt.Errorf("read %s in lent sandbox: %w", path, rlhostpb.FromStatus(err))
	}
	return r.GetData(), nil
}

func (c *sandboxClient) WriteFile(ctx context.Context, path string, data []byte, mode uint32) error {
	if _, err := c.rpc.WriteFile(ctx, &rlhostpb.WriteFileRequest{SandboxId: c.id, Path: []byte(path), Data: data, Mode: mode}); err != nil {
		return fmt.Errorf("write %s in lent sandbox: %w", path, rlhostpb.FromStatus(err))
	}
	return nil
}

func (c *sandboxClient) ListFiles(ctx context.Context, path string) ([]core.FileInfo, error) {
	r, err := c.rpc.ListFiles(ctx, &rlhostpb.ListFilesRequest{SandboxId: c.id, Path: []byte(path)})
	if err != nil {
		return nil, fmt.Errorf("list %s in lent sandbox: %w", path, rlhostpb.FromStatus(err))
	}
	return sandboxplugin.ToFiles(r), nil
}
