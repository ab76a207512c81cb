package envplugin

import (
	"context"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/rlhost/rlhost/core/pluginbase"
	rlhostpb "github.com/rlhost/rlhost/core/proto"
)

// Plugin is the go-plugin glue for an environment.
type Plugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl Environment // set on the plugin side only
}

var _ plugin.GRPCPlugin = (*Plugin)(nil)

// GRPCServer registers the environment's gRPC server (plugin side). The
// broker is kept so each episode can dial the Sandbox the host lends it.
func (p *Plugin) GRPCServer(broker *plugin.GRPCBroker, s *grpc.Server) error {
	rlhostpb.RegisterEnvironmentServer(s, newServer(p.Impl, broker))
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
