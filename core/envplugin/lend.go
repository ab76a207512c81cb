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
	cur    *lentServer // where new leases go; nil: start one at the next
	leases map[string]*lease
}

// lentServer is one Sandbox server on the broker.
type lentServer struct {
	id uint32
	// dialled: an episode lent on it started, so the plugin holds a
	// connection to it. Until then the plugin may never see the
	// announcement (go-plugin drops one not dialled within 5 s), and a
	// failed start gives the server up for a fresh one.
	dialled bool
	leases  int
	srv     *grpc.Server // nil until AcceptAndServe builds it
	stopped bool
}

// lease is one sandbox lent to one episode. Its context ends with the
// episode, cutting off calls still running on the sandbox.
type lease struct {
	id     string
	sb     Sandbox
	on     *lentServer
	ctx    context.Context
	cancel context.CancelFunc
}

func newLender(b *plugin.GRPCBroker) *lender {
	return &lender{broker: b, leases: map[string]*lease{}}
}

// lend leases sb until release; the lease's server broker id is what the
// plugin dials.
func (l *lender) lend(sb Sandbox) (*lease, error) {
	id := sb.ID()
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, dup := l.leases[id]; dup {
		// Requests carry only the sandbox id, so two live leases of one id
		// could not be told apart.
		return nil, fmt.Errorf("sandbox %s is already lent to a live episode of this environment", id)
	}
	if l.cur == nil {
		l.cur = &lentServer{id: l.broker.NextId()}
		go l.serve(l.cur)
	}
	ls := &lease{id: id, sb: sb, on: l.cur}
	ls.ctx, ls.cancel = context.WithCancel(context.Background())
	l.cur.leases++
	l.leases[id] = ls
	return ls, nil
}

// started records that the lease's episode started: the plugin dialled.
func (l *lender) started(ls *lease) {
	l.mu.Lock()
	ls.on.dialled = true
	l.mu.Unlock()
}

// release ends the lease. A server no episode ever started on, and no lease
// still holds, is stopped: the next episode announces a fresh one.
func (l *lender) release(ls *lease) {
	ls.cancel()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.leases[ls.id] != ls {
		return // released already
	}
	delete(l.leases, ls.id)
	s := ls.on
	s.leases--
	if s.dialled || s.leases > 0 {
		return
	}
	if l.cur == s {
		l.cur = nil
	}
	s.stopped = true
	if s.srv != nil {
		s.srv.Stop()
	}
}

// serve runs s on the broker until the broker closes or s is stopped.
// AcceptAndServe announces it before the plugin's dial, which waits for it.
func (l *lender) serve(s *lentServer) {
	l.broker.AcceptAndServe(s.id, func(opts []grpc.ServerOption) *grpc.Server {
		g := pluginbase.NewGRPCServer(opts)
		rlhostpb.RegisterSandboxServer(g, l)
		l.mu.Lock()
		defer l.mu.Unlock()
		if s.stopped {
			g.Stop() // Serve then returns at once
		}
		s.srv = g
		return g
	})
	// Also back here when it could not be announced: the next episode
	// starts a fresh server rather than naming a dead id.
	l.mu.Lock()
	if l.cur == s {
		l.cur = nil
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
