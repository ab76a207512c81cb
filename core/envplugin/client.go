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
	"github.com/rlhost/rlhost/core/schema"
)

// Client is the host-side Environment that talks to a plugin over gRPC. When
// an episode starts, it serves the episode's Sandbox on the go-plugin broker
// and stops that server when the episode ends (or never gets dialled).
type Client struct {
	rpc    rlhostpb.EnvironmentClient
	broker *plugin.GRPCBroker
	info   pluginbase.Info
}

var _ Environment = (*Client)(nil)

const describeTimeout = 10 * time.Second

// NewClient wraps a gRPC connection and fetches the plugin's Info once.
func NewClient(ctx context.Context, rpc rlhostpb.EnvironmentClient, broker *plugin.GRPCBroker) (*Client, error) {
	ctx, cancel := context.WithTimeout(ctx, describeTimeout)
	defer cancel()
	p, err := rpc.Describe(ctx, &rlhostpb.Empty{})
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
	return &Client{rpc: rpc, broker: broker, info: info}, nil
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

// NewEpisode lends ep.Sandbox to the plugin and starts the episode.
func (c *Client) NewEpisode(ctx context.Context, ep Episode) (Session, Observation, error) {
	req := &rlhostpb.NewEpisodeRequest{
		EpisodeId: ep.ID, Task: fromTask(ep.Task), Seed: ep.Seed,
		Group: int32(ep.Group), Index: int32(ep.Index),
	}
	lend := &lentServer{}
	if ep.Sandbox != nil {
		req.SandboxId = ep.Sandbox.ID()
		req.SandboxBrokerId = c.broker.NextId()
		lend.start(c.broker, req.SandboxBrokerId, ep.Sandbox)
	}
	r, err := c.rpc.NewEpisode(ctx, req)
	if err != nil {
		lend.stop()
		return nil, Observation{}, fmt.Errorf("start episode %s: %w", ep.ID, rlhostpb.FromStatus(err))
	}
	return &clientSession{c: c, id: ep.ID, lend: lend}, toObservation(r), nil
}

// lentServer runs the brokered Sandbox server for one episode. AcceptAndServe
// is started before the id is sent (the plugin dials it while handling
// NewEpisode); stop works whether or not the plugin ever dialled.
type lentServer struct {
	mu      sync.Mutex
	srv     *grpc.Server
	stopped bool
}

func (l *lentServer) start(b *plugin.GRPCBroker, id uint32, sb Sandbox) {
	go b.AcceptAndServe(id, func(opts []grpc.ServerOption) *grpc.Server {
		s := pluginbase.NewGRPCServer(opts)
		rlhostpb.RegisterSandboxServer(s, &sandboxServer{impl: sb})
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.stopped {
			// stop ran first: serve nothing. Stop now makes Serve return at once.
			s.Stop()
		}
		l.srv = s
		return s
	})
}

func (l *lentServer) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
	if l.srv != nil {
		l.srv.Stop()
	}
}

type clientSession struct {
	c    *Client
	id   string
	lend *lentServer
}

func (s *clientSession) Step(ctx context.Context, reply core.Message) (Observation, error) {
	r, err := s.c.rpc.Step(ctx, &rlhostpb.StepRequest{EpisodeId: s.id, Reply: fromMessage(reply)})
	if err != nil {
		return Observation{}, fmt.Errorf("step episode %s: %w", s.id, rlhostpb.FromStatus(err))
	}
	return toObservation(r), nil
}

func (s *clientSession) End(ctx context.Context, reason string) (Observation, error) {
	defer s.lend.stop()
	r, err := s.c.rpc.End(ctx, &rlhostpb.EndRequest{EpisodeId: s.id, Reason: reason})
	if err != nil {
		return Observation{}, fmt.Errorf("end episode %s: %w", s.id, rlhostpb.FromStatus(err))
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
