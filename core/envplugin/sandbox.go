package envplugin

import (
	"context"
	"fmt"

	"github.com/rlhost/rlhost/core"
	rlhostpb "github.com/rlhost/rlhost/core/proto"
	"github.com/rlhost/rlhost/core/sandboxplugin"
)

// sandboxClient is the environment's view of a lent Sandbox: a gRPC client on
// the broker connection the host opened for this episode.
type sandboxClient struct {
	rpc rlhostpb.SandboxClient
	id  string
}

func (c *sandboxClient) ID() string { return c.id }

func (c *sandboxClient) Exec(ctx context.Context, req core.ExecRequest) (core.ExecResult, error) {
	r, err := c.rpc.Exec(ctx, sandboxplugin.FromExecRequest("", req))
	if err != nil {
		return core.ExecResult{}, fmt.Errorf("exec in lent sandbox: %w", rlhostpb.FromStatus(err))
	}
	return sandboxplugin.ToExecResult(r), nil
}

func (c *sandboxClient) ReadFile(ctx context.Context, path string, maxBytes int64) ([]byte, error) {
	r, err := c.rpc.ReadFile(ctx, &rlhostpb.ReadFileRequest{Path: []byte(path), MaxBytes: maxBytes})
	if err != nil {
		return nil, fmt.Errorf("read %s in lent sandbox: %w", path, rlhostpb.FromStatus(err))
	}
	return r.GetData(), nil
}

func (c *sandboxClient) WriteFile(ctx context.Context, path string, data []byte, mode uint32) error {
	if _, err := c.rpc.WriteFile(ctx, &rlhostpb.WriteFileRequest{Path: []byte(path), Data: data, Mode: mode}); err != nil {
		return fmt.Errorf("write %s in lent sandbox: %w", path, rlhostpb.FromStatus(err))
	}
	return nil
}

func (c *sandboxClient) ListFiles(ctx context.Context, path string) ([]core.FileInfo, error) {
	r, err := c.rpc.ListFiles(ctx, &rlhostpb.ListFilesRequest{Path: []byte(path)})
	if err != nil {
		return nil, fmt.Errorf("list %s in lent sandbox: %w", path, rlhostpb.FromStatus(err))
	}
	return sandboxplugin.ToFiles(r), nil
}

// sandboxServer is the host side of a lent Sandbox: it serves one Sandbox
// implementation, ignoring any sandbox id the caller sends, so an environment
// can reach only the sandbox it was lent.
type sandboxServer struct {
	rlhostpb.UnimplementedSandboxServer
	impl Sandbox
}

func (s *sandboxServer) Info(context.Context, *rlhostpb.Empty) (*rlhostpb.SandboxInfo, error) {
	return &rlhostpb.SandboxInfo{Id: s.impl.ID()}, nil
}

func (s *sandboxServer) Exec(ctx context.Context, r *rlhostpb.ExecRequest) (*rlhostpb.ExecResult, error) {
	res, err := s.impl.Exec(ctx, sandboxplugin.ToExecRequest(r))
	if err != nil {
		return nil, rlhostpb.ToStatus(err)
	}
	return sandboxplugin.FromExecResult(res), nil
}

func (s *sandboxServer) ReadFile(ctx context.Context, r *rlhostpb.ReadFileRequest) (*rlhostpb.ReadFileResponse, error) {
	data, err := s.impl.ReadFile(ctx, string(r.GetPath()), r.GetMaxBytes())
	if err != nil {
		return nil, rlhostpb.ToStatus(err)
	}
	return &rlhostpb.ReadFileResponse{Data: data}, nil
}

func (s *sandboxServer) WriteFile(ctx context.Context, r *rlhostpb.WriteFileRequest) (*rlhostpb.Empty, error) {
	return &rlhostpb.Empty{}, rlhostpb.ToStatus(s.impl.WriteFile(ctx, string(r.GetPath()), r.GetData(), r.GetMode()))
}

func (s *sandboxServer) ListFiles(ctx context.Context, r *rlhostpb.ListFilesRequest) (*rlhostpb.ListFilesResponse, error) {
	fs, err := s.impl.ListFiles(ctx, string(r.GetPath()))
	if err != nil {
		return nil, rlhostpb.ToStatus(err)
	}
	return sandboxplugin.FromFiles(fs), nil
}
