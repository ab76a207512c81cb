package envplugin

import (
	"context"
	"fmt"
	"sync"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/pluginbase"
	rlhostpb "github.com/rlhost/rlhost/core/proto"
	"github.com/rlhost/rlhost/core/sandboxplugin"
)

// lender is the host side of lending sandboxes to one env plugin process.
// It serves the Sandbox service on one broker id for the client's life
// (started at the first episode with a sandbox), so an episode costs the
// plugin no new connection. Each request names its sandbox and is served only
// while that sandbox is leased to a live episode of this client: an env can
// reach the sandboxes of its own live episodes and nothing else.
//
// The server stops when the broker closes, which go-plugin does when the
// plugin client is closed or killed.
type lender struct {
	rlhostpb.UnimplementedSandboxServer
	broker *plugin.GRPCBroker

	mu     sync.Mutex
	id     uint32 // broker id of the running server; 0: none
	leases map[string]*lease
}

// lease is one sandbox lent to one live episode. Its context ends with the
// episode, cutting off calls still running on the sandbox.
type lease struct {
	sb     Sandbox
	ctx    context.Context
	cancel context.CancelFunc
}

func newLender(b *plugin.GRPCBroker) *lender {
	return &lender{broker: b, leases: map[string]*lease{}}
}

// lend leases sb until release is called and returns the broker id the
// plugin reaches it on.
func (l *lender) lend(sb Sandbox) (brokerID uint32, release func(), err error) {
	id := sb.ID()
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, dup := l.leases[id]; dup {
		// Requests carry only the sandbox id, so two live leases of one id
		// could not be told apart.
		return 0, nil, fmt.Errorf("sandbox %s is already lent to a live episode of this environment", id)
	}
	if l.id == 0 {
		l.id = l.broker.NextId()
		go l.serve(l.id)
	}
	ls := &lease{sb: sb}
	ls.ctx, ls.cancel = context.WithCancel(context.Background())
	l.leases[id] = ls
	return l.id, func() {
		ls.cancel()
		l.mu.Lock()
		if l.leases[id] == ls {
			delete(l.leases, id)
		}
		l.mu.Unlock()
	}, nil
}

// serve runs the Sandbox server on broker id until the broker closes.
// AcceptAndServe is started before the id is sent; the plugin's dial waits
// for the announcement.
func (l *lender) serve(id uint32) {
	l.broker.AcceptAndServe(id, func(opts []grpc.ServerOption) *grpc.Server {
		s := pluginbase.NewGRPCServer(opts)
		rlhostpb.RegisterSandboxServer(s, l)
		return s
	})
	// Back here the broker closed, or the server was never announced: a
	// later episode starts a fresh server rather than naming a dead id.
	l.mu.Lock()
	if l.id == id {
		l.id = 0
	}
	l.mu.Unlock()
}

// leased runs call on the sandbox leased under id, with a context that also
// ends when the lease does; an id not leased now is NotFound.
func leased[T any](ctx context.Context, l *lender, id string, call func(context.Context, Sandbox) (T, error)) (T, error) {
	l.mu.Lock()
	ls := l.leases[id]
	l.mu.Unlock()
	var zero T
	if ls == nil {
		return zero, rlhostpb.ToStatus(fmt.Errorf("sandbox %q is not lent to this environment (its episode ended?): %w", id, core.ErrNotFound))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(ls.ctx, cancel)()
	out, err := call(ctx, ls.sb)
	if err != nil {
		return zero, rlhostpb.ToStatus(err)
	}
	return out, nil
}

func (l *lender) Info(ctx context.Context, r *rlhostpb.SandboxID) (*rlhostpb.SandboxInfo, error) {
	return leased(ctx, l, r.GetId(), func(_ context.Context, sb Sandbox) (*rlhostpb.SandboxInfo, error) {
		return &rlhostpb.SandboxInfo{Id: sb.ID()}, nil
	})
}

func (l *lender) Exec(ctx context.Context, r *rlhostpb.ExecRequest) (*rlhostpb.ExecResult, error) {
	return leased(ctx, l, r.GetSandboxId(), func(ctx context.Context, sb Sandbox) (*rlhostpb.ExecResult, error) {
		res, err := sb.Exec(ctx, sandboxplugin.ToExecRequest(r))
		if err != nil {
			return nil, err
		}
		return sandboxplugin.FromExecResult(res), nil
	})
}

func (l *lender) ReadFile(ctx context.Context, r *rlhostpb.ReadFileRequest) (*rlhostpb.ReadFileResponse, error) {
	return leased(ctx, l, r.GetSandboxId(), func(ctx context.Context, sb Sandbox) (*rlhostpb.ReadFileResponse, error) {
		data, err := sb.ReadFile(ctx, string(r.GetPath()), r.GetMaxBytes())
		if err != nil {
			return nil, err
		}
		return &rlhostpb.ReadFileResponse{Data: data}, nil
	})
}

func (l *lender) WriteFile(ctx context.Context, r *rlhostpb.WriteFileRequest) (*rlhostpb.Empty, error) {
	return leased(ctx, l, r.GetSandboxId(), func(ctx context.Context, sb Sandbox) (*rlhostpb.Empty, error) {
		return &rlhostpb.Empty{}, sb.WriteFile(ctx, string(r.GetPath()), r.GetData(), r.GetMode())
	})
}

func (l *lender) ListFiles(ctx context.Context, r *rlhostpb.ListFilesRequest) (*rlhostpb.ListFilesResponse, error) {
	return leased(ctx, l, r.GetSandboxId(), func(ctx context.Context, sb Sandbox) (*rlhostpb.ListFilesResponse, error) {
		fs, err := sb.ListFiles(ctx, string(r.GetPath()))
		if err != nil {
			return nil, err
		}
		return sandboxplugin.FromFiles(fs), nil
	})
}
