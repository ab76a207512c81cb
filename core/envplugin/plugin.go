package envplugin

import (
	"context"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/rlhost/rlhost/core/pluginbase"
	rlhostpb "github.com/rlhost/rlhost/core/proto"
)

// Plugin is the go-plugin glue for an environment.
type Plugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl Environment // set on the plugin side only
	// Logger receives the plugin side's own messages (recovered panics);
	// nil means hclog JSON on stderr, which the host relays.
	Logger hclog.Logger
}

func (p *Plugin) logger() hclog.Logger {
	if p.Logger != nil {
		return p.Logger
	}
	return pluginbase.NewLogger(pluginbase.KindEnv)
}

var _ plugin.GRPCPlugin = (*Plugin)(nil)

// GRPCServer registers the environment's gRPC server (plugin side). The
// broker is kept so each episode can dial the Sandbox the host lends it.
func (p *Plugin) GRPCServer(broker *plugin.GRPCBroker, s *grpc.Server) error {
	// A panic in one episode's call fails that call, not every episode.
	s.RegisterService(pluginbase.Recovering(&rlhostpb.Environment_ServiceDesc, p.logger()), newServer(p.Impl, broker))
	return nil
}

// GRPCClient returns a *Client implementing Environment (host side).
func (p *Plugin) GRPCClient(ctx context.Context, broker *plugin.GRPCBroker, conn *grpc.ClientConn) (interface{}, error) {
	return NewClient(ctx, rlhostpb.NewEnvironmentClient(conn), broker)
}

// Serve runs env as an environment plugin. Call it from the plugin's main.
func Serve(env Environment) {
	pluginbase.Serve(pluginbase.KindEnv, &Plugin{Impl: env}, nil)
}
