package envplugin

import (
	"context"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/rlhost/rlhost/core/sdk/pluginbase"
	"github.com/rlhost/rlhost/core/sdk/wire/rlhostpb"
)

// Plugin is the go-plugin glue for an environment.
type Plugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl Environment // set on the plugin side only
	// Logger receives the plugin side's own messages (recovered panics),
	// or on the host side the lent-sandbox socket's; nil means hclog JSON on
	// stderr, which the host relays, or on the host side nothing.
	Logger hclog.Logger

	mu  sync.Mutex
	srv *server // the plugin side's, once GRPCServer made it
}

func (p *Plugin) logger() hclog.Logger {
	if p.Logger != nil {
		return p.Logger
	}
	return pluginbase.NewLogger(pluginbase.KindEnv)
}

var _ plugin.GRPCPlugin = (*Plugin)(nil)

// GRPCServer registers the environment's gRPC server (plugin side).
func (p *Plugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	// A panic in one episode's call fails that call, not every episode.
	log := p.logger()
	srv := newServer(p.Impl, log)
	p.mu.Lock()
	p.srv = srv
	p.mu.Unlock()
	s.RegisterService(pluginbase.Recovering(&rlhostpb.Environment_ServiceDesc, log), srv)
	return nil
}

// closeEpisodes removes the plugin side's episode socket, for an exit that
// skipped Shutdown.
func (p *Plugin) closeEpisodes(context.Context) {
	p.mu.Lock()
	srv := p.srv
	p.mu.Unlock()
	if srv != nil {
		srv.episodes.close()
	}
}

// GRPCClient returns a *Client implementing Environment (host side).
func (p *Plugin) GRPCClient(ctx context.Context, _ *plugin.GRPCBroker, conn *grpc.ClientConn) (interface{}, error) {
	log := p.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return NewClient(ctx, conn, log)
}

// Serve runs env as an environment plugin. Call it from the plugin's main.
func Serve(env Environment) {
	p := &Plugin{Impl: env}
	pluginbase.Serve(pluginbase.KindEnv, p, p.closeEpisodes)
	p.closeEpisodes(context.Background())
}
