package envplugin

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/sdk/wire/lend"
	"github.com/rlhost/rlhost/core/sdk/wire/rlhostpb"
)

// server is the plugin-side gRPC server. It owns the live sessions, keyed by
// episode id, the connections to the lent-sandbox sockets (the host's, or
// a backend's; one per socket), and the episode socket it serves the
// host's episode calls on beside gRPC.
type server struct {
	rlhostpb.UnimplementedEnvironmentServer
	impl     Environment
	log      hclog.Logger // recovered panics
	conns    *lendConns
	episodes *episodeSocket

	mu       sync.Mutex
	sessions map[string]Session // nil: still starting
}

func newServer(impl Environment, log hclog.Logger) *server {
	s := &server{impl: impl, log: log, conns: newLendConns(lend.Dial), sessions: map[string]Session{}}
	s.episodes = &episodeSocket{log: log, handle: s.handleEpisode}
	return s
}

// lendConns connects to each lent-sandbox socket once and keeps the
// connection for every episode lent on it. A failed dial is not kept, and a
// connection that broke is replaced, at the next episode.
type lendConns struct {
	dial func(context.Context, string) (*lend.Conn, error)

	mu    sync.Mutex // held across a dial, so concurrent episodes dial once
	conns map[string]*lend.Conn
}

func newLendConns(dial func(context.Context, string) (*lend.Conn, error)) *lendConns {
	return &lendConns{dial: dial, conns: map[string]*lend.Conn{}}
}

func (b *lendConns) get(ctx context.Context, sock string) (*lend.Conn, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c, ok := b.conns[sock]; ok && !c.Broken() {
		return c, nil
	}
	c, err := b.dial(ctx, sock)
	if err != nil {
		return nil, err
	}
	b.conns[sock] = c
	return c, nil
}

// close closes every connection; a later get dials again.
func (b *lendConns) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for sock, c := range b.conns {
		c.Close()
		delete(b.conns, sock)
	}
}

// Describe also opens the episode socket, at the host's first call, and
// names it.
func (s *server) Describe(context.Context, *rlhostpb.Empty) (*rlhostpb.PluginInfo, error) {
	info, err := rlhostpb.FromInfo(s.impl.Info())
	if err != nil {
		return nil, rlhostpb.ToStatus(err)
	}
	info.EpisodeSocket = s.episodes.open()
	info.LentTokens = true
	return info, nil
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

	var sb Sandbox
	if r.GetSandboxSocket() != "" {
		c, err := s.conns.get(ctx, r.GetSandboxSocket())
		if err != nil {
			release()
			return nil, rlhostpb.ToStatus(fmt.Errorf("lent sandbox for episode %s: %w", id, err))
		}
		sb = lend.Borrow(c, r.GetSandboxId(), r.GetSandboxToken())
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
		release()
		return nil, rlhostpb.ToStatus(err)
	}
	s.mu.Lock()
	s.sessions[id] = sess
	s.mu.Unlock()
	return fromObservation(obs), nil
}

// endTimeout bounds the End the server itself calls for an abandoned session.
const endTimeout = 30 * time.Second

func (s *server) session(id string) (Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess := s.sessions[id]
	if sess == nil { // absent, or still starting
		return nil, fmt.Errorf("episode %s: %w", id, core.ErrNotFound)
	}
	return sess, nil
}

func (s *server) Step(ctx context.Context, r *rlhostpb.StepRequest) (*rlhostpb.Observation, error) {
	sess, err := s.session(r.GetEpisodeId())
	if err != nil {
		return nil, rlhostpb.ToStatus(err)
	}
	obs, err := sess.Step(ctx, toMessage(r.GetReply()))
	if err != nil {
		return nil, rlhostpb.ToStatus(err)
	}
	return fromObservation(obs), nil
}

func (s *server) End(ctx context.Context, r *rlhostpb.EndRequest) (*rlhostpb.Observation, error) {
	s.mu.Lock()
	sess := s.sessions[r.GetEpisodeId()]
	if sess != nil {
		delete(s.sessions, r.GetEpisodeId())
	}
	s.mu.Unlock()
	if sess == nil {
		return nil, rlhostpb.ToStatus(fmt.Errorf("episode %s: %w", r.GetEpisodeId(), core.ErrNotFound))
	}
	obs, err := sess.End(ctx, r.GetReason())
	if err != nil {
		return nil, rlhostpb.ToStatus(err)
	}
	return fromObservation(obs), nil
}

// Shutdown ends every live session so environments can release resources,
// then drops the lent-sandbox connection and removes the episode socket;
// the host kills the process right after.
func (s *server) Shutdown(ctx context.Context, _ *rlhostpb.Empty) (*rlhostpb.Empty, error) {
	s.mu.Lock()
	live := s.sessions
	s.sessions = map[string]Session{}
	s.mu.Unlock()
	for _, sess := range live {
		if sess != nil {
			_, _ = sess.End(ctx, core.FinishCancelled)
		}
	}
	s.conns.close()
	s.episodes.close()
	return &rlhostpb.Empty{}, nil
}
