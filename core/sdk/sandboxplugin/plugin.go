package sandboxplugin

import (
	"context"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/rlhost/rlhost/core/sdk/pluginbase"
	"github.com/rlhost/rlhost/core/sdk/wire/rlhostpb"
)

// Plugin is the go-plugin glue for a sandbox backend.
type Plugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl Backend // set on the plugin side only
	// Logger receives the plugin side's own messages (recovered panics);
	// nil means hclog JSON on stderr, which the host relays.
	Logger hclog.Logger

	srv atomic.Pointer[server] // the plugin side's, once GRPCServer made it
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
	log := p.logger()
	srv := newServer(p.Impl, log)
	p.srv.Store(srv)
	s.RegisterService(pluginbase.Recovering(&rlhostpb.SandboxBackend_ServiceDesc, log), srv)
	return nil
}

// GRPCClient returns a *Client implementing Backend (host side).
func (p *Plugin) GRPCClient(ctx context.Context, _ *plugin.GRPCBroker, conn *grpc.ClientConn) (interface{}, error) {
	c, err := NewClient(ctx, rlhostpb.NewSandboxBackendClient(conn))
	if err != nil {
		return nil, err
	}
	life, end := context.WithCancel(ctx)
	go func() {
		defer end()
		pluginbase.UntilShutdown(life, conn)
	}()
	c.life = life
	return c, nil
}

// Serve runs b as a sandbox backend plugin. Call it from the plugin's main.
// If the host dies without shutting the plugin down, b.Shutdown still runs,
// so no sandbox outlives its host for longer than that.
func Serve(b Backend) {
	p := &Plugin{Impl: b}
	pluginbase.Serve(pluginbase.KindSandbox, p, func(ctx context.Context) {
		if srv := p.srv.Load(); srv != nil {
			_ = srv.shutdown(ctx)
			return
		}
		_ = b.Shutdown(ctx)
	})
	// The host may stop the plugin without a Shutdown call; the socket
	// goes all the same.
	if srv := p.srv.Load(); srv != nil {
		srv.loans.Close()
	}
}
