package envplugin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/core/sdk/pluginbase"
	"github.com/rlhost/rlhost/core/sdk/wire/lend"
	"github.com/rlhost/rlhost/core/sdk/wire/rlhostpb"
)

// Client is the host-side Environment that talks to a plugin over gRPC, and
// sends episode calls (NewEpisode, Step, End) as frames on the plugin's
// episode socket when it serves one. It lends each episode's Sandbox to the
// plugin from the episode's start to its end, over one socket for the
// client's life (lend.NewHostSocket), unless its backend lends it.
type Client struct {
	rpc    rlhostpb.EnvironmentClient
	eps    *episodeConn // nil: episode calls go over gRPC
	socket *lend.Socket
	info   pluginbase.Info
	// The plugin puts each lent call's token in it, so a sandbox its
	// backend lends can be lent on the backend's socket.
	tokens bool
}

var _ Environment = (*Client)(nil)

const describeTimeout = 10 * time.Second

// NewClient wraps the gRPC connection to a plugin and fetches its Info once.
// The client lives until ctx ends or conn is closed (go-plugin does both
// when the plugin is killed); log receives what goes wrong on the sockets
// sandboxes are lent on.
func NewClient(ctx context.Context, conn *grpc.ClientConn, log hclog.Logger) (*Client, error) {
	rpc := rlhostpb.NewEnvironmentClient(conn)
	dctx, cancel := context.WithTimeout(ctx, describeTimeout)
	defer cancel()
	p, err := rpc.Describe(dctx, &rlhostpb.Empty{})
	if err != nil {
		return nil, fmt.Errorf("describe env plugin: %w", rlhostpb.FromStatus(err))
	}
	info, err := rlhostpb.ToInfo(p)
	if err != nil {
		return nil, fmt.Errorf("decode env plugin info: %w", err)
	}
	if info.Kind != "" && info.Kind != pluginbase.KindEnv {
		return nil, fmt.Errorf("plugin %q is a %s plugin, not an environment", info.Name, info.Kind)
	}
	life, end := context.WithCancel(ctx)
	go func() {
		defer end()
		pluginbase.UntilShutdown(life, conn)
	}()
	c := &Client{rpc: rpc, socket: lend.NewHostSocket(life, log), info: info, tokens: p.GetLentTokens()}
	if sock := p.GetEpisodeSocket(); sock != "" {
		c.eps = newEpisodeConn(life, sock)
		if _, err := c.eps.get(dctx); err != nil {
			// gRPC reaches the plugin, so it can still be used.
			log.Warn("env plugin's episode socket unreachable; episode calls go over gRPC", "plugin", info.Name, "error", err)
			c.eps = nil
		}
	}
	return c, nil
}

// episodeCall sends call on the episode socket, or calls grpc when the
// plugin serves none; errors are converted alike.
func (c *Client) episodeCall(ctx context.Context, call *rlhostpb.EnvCall, grpc func(context.Context) (*rlhostpb.Observation, error)) (*rlhostpb.Observation, error) {
	if c.eps != nil {
		r, err := c.eps.call(ctx, call)
		if !errors.Is(err, errEpisodeDial) {
			return r, err
		}
	}
	r, err := grpc(ctx)
	if err != nil {
		return nil, rlhostpb.FromStatus(err)
	}
	return r, nil
}

// Info returns the description fetched when the client was made.
func (c *Client) Info() pluginbase.Info { return c.info }

// Configure sends the decoded config.
func (c *Client) Configure(ctx context.Context, cfg schema.Config) schema.Diagnostics {
	resp, err := c.rpc.Configure(ctx, rlhostpb.FromConfig(cfg))
	if err != nil {
		return schema.Diagnostics{{Severity: schema.Error, Summary: "plugin failed to configure", Detail: rlhostpb.FromStatus(err).Error()}}
	}
	return rlhostpb.ToDiagnostics(resp)
}

// Tasks lists the environment's tasks.
func (c *Client) Tasks(ctx context.Context) ([]core.Task, error) {
	r, err := c.rpc.Tasks(ctx, &rlhostpb.Empty{})
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", rlhostpb.FromStatus(err))
	}
	out := make([]core.Task, 0, len(r.GetTasks()))
	for _, t := range r.GetTasks() {
		out = append(out, toTask(t))
	}
	return out, nil
}

// NewEpisode lends ep.Sandbox to the plugin and starts the episode. A
// sandbox its backend lends (lend.Leased, with a lease) is lent on
// the backend's socket when the plugin can carry its token, and its calls
// never pass through the host; any other is lent on the host's socket
// until End.
func (c *Client) NewEpisode(ctx context.Context, ep Episode) (Session, Observation, error) {
	req := &rlhostpb.NewEpisodeRequest{
		EpisodeId: ep.ID, Task: fromTask(ep.Task), Seed: ep.Seed,
		Group: int32(ep.Group), Index: int32(ep.Index),
	}
	var loan *lend.Loan
	if l := backendLease(ep.Sandbox); c.tokens && l.Socket != "" {
		req.SandboxId, req.SandboxSocket, req.SandboxToken = ep.Sandbox.ID(), l.Socket, l.Token()
	} else if ep.Sandbox != nil {
		var err error
		if loan, err = c.socket.Lend(ep.Sandbox, nil); err != nil {
			return nil, Observation{}, fmt.Errorf("start episode %s: %w", ep.ID, err)
		}
		req.SandboxId, req.SandboxSocket = ep.Sandbox.ID(), loan.Socket()
	}
	r, err := c.episodeCall(ctx, &rlhostpb.EnvCall{Call: &rlhostpb.EnvCall_NewEpisode{NewEpisode: req}},
		func(ctx context.Context) (*rlhostpb.Observation, error) { return c.rpc.NewEpisode(ctx, req) })
	if err != nil {
		if loan != nil {
			loan.Release(ctx)
		}
		return nil, Observation{}, fmt.Errorf("start episode %s: %w", ep.ID, err)
	}
	return &clientSession{c: c, id: ep.ID, loan: loan}, toObservation(r), nil
}

// backendLease is the lease of a sandbox its backend lends; zero for any
// other.
func backendLease(sb Sandbox) lend.Lease {
	if l, ok := sb.(lend.Leased); ok {
		return l.Lease()
	}
	return lend.Lease{}
}

type clientSession struct {
	c    *Client
	id   string
	loan *lend.Loan // nil: no sandbox, or one lent by its backend
}

func (s *clientSession) Step(ctx context.Context, reply core.Message) (Observation, error) {
	req := &rlhostpb.StepRequest{EpisodeId: s.id, Reply: fromMessage(reply)}
	r, err := s.c.episodeCall(ctx, &rlhostpb.EnvCall{Call: &rlhostpb.EnvCall_Step{Step: req}},
		func(ctx context.Context) (*rlhostpb.Observation, error) { return s.c.rpc.Step(ctx, req) })
	if err != nil {
		return Observation{}, fmt.Errorf("step episode %s: %w", s.id, err)
	}
	return toObservation(r), nil
}

func (s *clientSession) End(ctx context.Context, reason string) (Observation, error) {
	// The env may still use the sandbox while it ends (scoring), so the
	// loan ends after the call, whatever its outcome.
	if s.loan != nil {
		defer s.loan.Release(ctx)
	}
	req := &rlhostpb.EndRequest{EpisodeId: s.id, Reason: reason}
	r, err := s.c.episodeCall(ctx, &rlhostpb.EnvCall{Call: &rlhostpb.EnvCall_End{End: req}},
		func(ctx context.Context) (*rlhostpb.Observation, error) { return s.c.rpc.End(ctx, req) })
	if err != nil {
		return Observation{}, fmt.Errorf("end episode %s: %w", s.id, err)
	}
	return toObservation(r), nil
}

// Shutdown asks the plugin to end all sessions before it is killed.
func (c *Client) Shutdown(ctx context.Context) error {
	if _, err := c.rpc.Shutdown(ctx, &rlhostpb.Empty{}); err != nil {
		return fmt.Errorf("shut down env plugin: %w", rlhostpb.FromStatus(err))
	}
	return nil
}
