package sandboxplugin

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/sdk/wire/lend"
	"github.com/rlhost/rlhost/core/sdk/wire/rlhostpb"
)

// server wraps a Backend implementation as the plugin-side gRPC server,
// and lends the sandboxes the host asks it to on a socket of its own.
type server struct {
	rlhostpb.UnimplementedSandboxBackendServer
	impl  Backend
	loans *lend.Socket
}

func newServer(impl Backend, log hclog.Logger) *server {
	return &server{impl: impl, loans: lend.NewBackendSocket(log)}
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
	out := fromSandboxInfo(info)
	if q := r.GetLend(); q != nil {
		ls, err := s.loans.Lease(&lend.Bound{Backend: s.impl, SandboxID: info.ID, DefaultTimeout: toLendTimeout(q)})
		if err != nil {
			// The host gets no sandbox, so none may outlive the call.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), destroyTimeout)
			defer cancel()
			if derr := s.impl.Destroy(dctx, info.ID); derr != nil {
				err = fmt.Errorf("%w (and destroying the sandbox failed: %v)", err, derr)
			}
			return nil, rlhostpb.ToStatus(err)
		}
		out.Lease = fromLease(ls)
	}
	return out, nil
}

// destroyTimeout bounds the destroy of a sandbox whose create failed late.
const destroyTimeout = 30 * time.Second

func (s *server) Exec(ctx context.Context, r *rlhostpb.ExecRequest) (*rlhostpb.ExecResult, error) {
	start := time.Now()
	res, err := s.impl.Exec(ctx, r.GetSandboxId(), rlhostpb.ToExecRequest(r))
	if err != nil {
		return nil, rlhostpb.ToStatus(err)
	}
	if res.Duration == 0 {
		res.Duration = time.Since(start)
	}
	return rlhostpb.FromExecResult(res), nil
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
	return rlhostpb.FromFiles(fs), nil
}

// Destroy ends the sandbox's lease first, cutting off its lent calls and
// waiting for them (for a bounded time), so none runs on a sandbox being
// destroyed, or on the one a backend that reuses sandboxes hands out next.
func (s *server) Destroy(ctx context.Context, r *rlhostpb.SandboxID) (*rlhostpb.DestroyResponse, error) {
	out := &rlhostpb.DestroyResponse{}
	if use, ok := s.loans.Release(ctx, r.GetId()); ok {
		out.LeaseUse = fromUsage(use)
	}
	if err := s.impl.Destroy(ctx, r.GetId()); err != nil {
		return nil, rlhostpb.ToStatus(err)
	}
	return out, nil
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
	return &rlhostpb.Empty{}, rlhostpb.ToStatus(s.shutdown(ctx))
}

// shutdown ends every lease and the lent-sandbox socket, then the backend.
func (s *server) shutdown(ctx context.Context) error {
	s.loans.Close()
	return s.impl.Shutdown(ctx)
}
