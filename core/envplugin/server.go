package envplugin

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/pluginbase"
	rlhostpb "github.com/rlhost/rlhost/core/proto"
)

// server is the plugin-side gRPC server. It owns the live sessions, keyed by
// episode id, and the broker connection to each episode's lent Sandbox.
type server struct {
	rlhostpb.UnimplementedEnvironmentServer
	impl   Environment
	broker *plugin.GRPCBroker

	mu       sync.Mutex
	sessions map[string]*liveSession
}

type liveSession struct {
	sess Session
	conn *grpc.ClientConn
}

func newServer(impl Environment, broker *plugin.GRPCBroker) *server {
	return &server{impl: impl, broker: broker, sessions: map[string]*liveSession{}}
}

func (s *server) Describe(context.Context, *rlhostpb.Empty) (*rlhostpb.PluginInfo, error) {
	info, err := rlhostpb.FromInfo(s.impl.Info())
	return info, rlhostpb.ToStatus(err)
}

func (s *server) Configure(ctx context.Context, r *rlhostpb.ConfigureRequest) (*rlhostpb.ConfigureResponse, error) {
	return rlhostpb.FromDiagnostics(s.impl.Configure(ctx, rlhostpb.ToConfig(r))), nil
}

func (s *server) Tasks(ctx context.Context, _ *rlhostpb.Empty) (*rlhostpb.TasksResponse, error) {
	ts, err := s.impl.Tasks(ctx)
	if err != nil {
		return nil, rlhostpb.ToStatus(err)
	}
	out := &rlhostpb.TasksResponse{}
	for _, t := range ts {
		out.Tasks = append(out.Tasks, fromTask(t))
	}
	return out, nil
}

func (s *server) NewEpisode(ctx context.Context, r *rlhostpb.NewEpisodeRequest) (*rlhostpb.Observation, error) {
	id := r.GetEpisodeId()
	// Reserve the id first, so two starts of one episode cannot both run.
	s.mu.Lock()
	if _, dup := s.sessions[id]; dup {
		s.mu.Unlock()
		return nil, rlhostpb.ToStatus(fmt.Errorf("episode %s already started", id))
	}
	s.sessions[id] = nil
	s.mu.Unlock()
	release := func() {
		s.mu.Lock()
		delete(s.sessions, id)
		s.mu.Unlock()
	}

	var conn *grpc.ClientConn
	var sb Sandbox
	if r.GetSandboxBrokerId() != 0 {
		c, err := s.broker.DialWithOptions(r.GetSandboxBrokerId(), pluginbase.DialOptions()...)
		if err != nil {
			release()
			return nil, rlhostpb.ToStatus(fmt.Errorf("dial lent sandbox for episode %s: %w", id, err))
		}
		conn = c
		sb = &sandboxClient{rpc: rlhostpb.NewSandboxClient(c), id: r.GetSandboxId()}
	}
	ep := Episode{
		ID: id, Task: toTask(r.GetTask()), Sandbox: sb,
		Seed: r.GetSeed(), Group: int(r.GetGroup()), Index: int(r.GetIndex()),
	}
	sess, obs, err := s.impl.NewEpisode(ctx, ep)
	if err == nil && ctx.Err() != nil {
		// The host gave up waiting and will never call End for a session it
		// did not get: end it here, so End still runs exactly once.
		ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endTimeout)
		_, _ = sess.End(ectx, core.FinishCancelled)
		cancel()
		err = ctx.Err()
	}
	if err != nil {
		if conn != nil {
			conn.Close()
		}
		release()
		return nil, rlhostpb.ToStatus(err)
	}
	s.mu.Lock()
	s.sessions[id] = &liveSession{sess: sess, conn: conn}
	s.mu.Unlock()
	return fromObservation(obs), nil
}

// endTimeout bounds the End the server itself calls for an abandoned session.
const endTimeout = 30 * time.Second

func (s *server) session(id string) (*liveSession, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ls, ok := s.sessions[id]
	if !ok || ls == nil { // nil: still starting
		return nil, fmt.Errorf("episode %s: %w", id, core.ErrNotFound)
	}
	return ls, nil
}

func (s *server) Step(ctx context.Context, r *rlhostpb.StepRequest) (*rlhostpb.Observation, error) {
	ls, err := s.session(r.GetEpisodeId())
	if err != nil {
		return nil, rlhostpb.ToStatus(err)
	}
	obs, err := ls.sess.Step(ctx, toMessage(r.GetReply()))
	if err != nil {
		return nil, rlhostpb.ToStatus(err)
	}
	return fromObservation(obs), nil
}

func (s *server) End(ctx context.Context, r *rlhostpb.EndRequest) (*rlhostpb.Observation, error) {
	s.mu.Lock()
	ls, ok := s.sessions[r.GetEpisodeId()]
	if ok && ls != nil {
		delete(s.sessions, r.GetEpisodeId())
	}
	s.mu.Unlock()
	if !ok || ls == nil {
		return nil, rlhostpb.ToStatus(fmt.Errorf("episode %s: %w", r.GetEpisodeId(), core.ErrNotFound))
	}
	defer func() {
		if ls.conn != nil {
			ls.conn.Close()
		}
	}()
	obs, err := ls.sess.End(ctx, r.GetReason())
	if err != nil {
		return nil, rlhostpb.ToStatus(err)
	}
	return fromObservation(obs), nil
}

// Shutdown ends every live session so environments can release resources;
// the host kills the process right after.
func (s *server) Shutdown(ctx context.Context, _ *rlhostpb.Empty) (*rlhostpb.Empty, error) {
	s.mu.Lock()
	live := s.sessions
	s.sessions = map[string]*liveSession{}
	s.mu.Unlock()
	for _, ls := range live {
		if ls == nil {
			continue
		}
		_, _ = ls.sess.End(ctx, core.FinishCancelled)
		if ls.conn != nil {
			ls.conn.Close()
		}
	}
	return &rlhostpb.Empty{}, nil
}
