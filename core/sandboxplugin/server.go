package sandboxplugin

import (
	"context"
	"time"

	"github.com/rlhost/rlhost/core"
	rlhostpb "github.com/rlhost/rlhost/core/proto"
)

// server wraps a Backend implementation as the plugin-side gRPC server.
type server struct {
	rlhostpb.UnimplementedSandboxBackendServer
	impl Backend
}

func (s *server) Describe(context.Context, *rlhostpb.Empty) (*rlhostpb.PluginInfo, error) {
	info, err := rlhostpb.FromInfo(s.impl.Info())
	return info, rlhostpb.ToStatus(err)
}

func (s *server) Configure(ctx context.Context, r *rlhostpb.ConfigureRequest) (*rlhostpb.ConfigureResponse, error) {
	spec := core.SandboxSpec{}
	if r.GetSandboxSpec() != nil {
		spec = toSpec(r.GetSandboxSpec())
	}
	return rlhostpb.FromDiagnostics(s.impl.Configure(ctx, rlhostpb.ToConfig(r), spec)), nil
}

func (s *server) Create(ctx context.Context, r *rlhostpb.CreateRequest) (*rlhostpb.SandboxInfo, error) {
	info, err := s.impl.Create(ctx, toSpec(r.GetSpec()))
	if err != nil {
		return nil, rlhostpb.ToStatus(err)
	}
	return fromSandboxInfo(info), nil
}

func (s *server) Exec(ctx context.Context, r *rlhostpb.ExecRequest) (*rlhostpb.ExecResult, error) {
	start := time.Now()
	res, err := s.impl.Exec(ctx, r.GetSandboxId(), ToExecRequest(r))
	if err != nil {
		return nil, rlhostpb.ToStatus(err)
	}
	if res.Duration == 0 {
		res.Duration = time.Since(start)
	}
	return FromExecResult(res), nil
}

func (s *server) ReadFile(ctx context.Context, r *rlhostpb.ReadFileRequest) (*rlhostpb.ReadFileResponse, error) {
	data, err := s.impl.ReadFile(ctx, r.GetSandboxId(), string(r.GetPath()), r.GetMaxBytes())
	if err != nil {
		return nil, rlhostpb.ToStatus(err)
	}
	return &rlhostpb.ReadFileResponse{Data: data}, nil
}

func (s *server) WriteFile(ctx context.Context, r *rlhostpb.WriteFileRequest) (*rlhostpb.Empty, error) {
	return &rlhostpb.Empty{}, rlhostpb.ToStatus(s.impl.WriteFile(ctx, r.GetSandboxId(), string(r.GetPath()), r.GetData(), r.GetMode()))
}

func (s *server) ListFiles(ctx context.Context, r *rlhostpb.ListFilesRequest) (*rlhostpb.ListFilesResponse, error) {
	fs, err := s.impl.ListFiles(ctx, r.GetSandboxId(), string(r.GetPath()))
	if err != nil {
		return nil, rlhostpb.ToStatus(err)
	}
	return FromFiles(fs), nil
}

func (s *server) Destroy(ctx context.Context, r *rlhostpb.SandboxID) (*rlhostpb.Empty, error) {
	return &rlhostpb.Empty{}, rlhostpb.ToStatus(s.impl.Destroy(ctx, r.GetId()))
}

func (s *server) List(ctx context.Context, r *rlhostpb.ListRequest) (*rlhostpb.ListResponse, error) {
	infos, err := s.impl.List(ctx, r.GetLabels())
	if err != nil {
		return nil, rlhostpb.ToStatus(err)
	}
	return fromSandboxInfos(infos), nil
}

func (s *server) ReapOrphans(ctx context.Context, _ *rlhostpb.Empty) (*rlhostpb.ListResponse, error) {
	infos, err := s.impl.ReapOrphans(ctx)
	if err != nil {
		return nil, rlhostpb.ToStatus(err)
	}
	return fromSandboxInfos(infos), nil
}

func (s *server) Shutdown(ctx context.Context, _ *rlhostpb.Empty) (*rlhostpb.Empty, error) {
	return &rlhostpb.Empty{}, rlhostpb.ToStatus(s.impl.Shutdown(ctx))
}
