package sandboxplugin

import (
	"context"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/rlhost/rlhost/core/pluginbase"
	rlhostpb "github.com/rlhost/rlhost/core/proto"
)

// Plugin is the go-plugin glue for a sandbox backend.
type Plugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl Backend // set on the plugin side only
	// Logger receives the plugin side's own messages (recovered panics);
	// nil means hclog JSON on stderr, which the host relays.
	Logger hclog.Logger
}

func (p *Plugin) logger() hclog.Logger {
	if p.Logger != nil {
		return p.Logger
	}
	return pluginbase.NewLogger(pluginbase.KindSandbox)
}

var _ plugin.GRPCPlugin = (*Plugin)(nil)

// GRPCServer registers the backend's gRPC server (plugin side).
func (p *Plugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	// A panic in one sandbox's call fails that call, not every sandbox.
	s.RegisterService(pluginbase.Recovering(&rlhostpb.SandboxBackend_ServiceDesc, p.logger()), &server{impl: p.Impl})
	return nil
}

// GRPCClient returns a *Client implementing Backend (host side).
func (p *Plugin) GRPCClient(ctx context.Context, _ *plugin.GRPCBroker, conn *grpc.ClientConn) (interface{}, error) {
	return NewClient(ctx, rlhostpb.NewSandboxBackendClient(conn))
}

// Serve runs b as a sandbox backend plugin. Call it from the plugin's main.
// If the host dies without shutting the plugin down, b.Shutdown still runs,
// so no sandbox outlives its host for longer than that.
func Serve(b Backend) {
	pluginbase.Serve(pluginbase.KindSandbox, &Plugin{Impl: b}, func(ctx context.Context) { _ = b.Shutdown(ctx) })
}
