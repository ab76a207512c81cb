package pluginbase

import (
	"context"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
)

// Serve runs p as a plugin of the given kind until the host kills it. It
// logs hclog JSON to stderr, which the host re-logs under the plugin's name.
func Serve(kind string, p plugin.Plugin) {
	logger := NewLogger(kind)
	go WatchParent(context.Background(), logger, 500*time.Millisecond)
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins:         map[string]plugin.Plugin{kind: p},
		GRPCServer:      plugin.DefaultGRPCServer,
		Logger:          logger,
	})
}

// NewLogger returns the JSON logger plugins should use.
func NewLogger(name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:       name,
		Level:      hclog.Info,
		Output:     os.Stderr,
		JSONFormat: true,
	})
}

// WatchParent exits the process when its parent changes. go-plugin sets no
// parent-death signal, so without this a host killed with SIGKILL would
// leave its plugins running forever (re-parented to init or a subreaper).
func WatchParent(ctx context.Context, logger hclog.Logger, every time.Duration) {
	parent := os.Getppid()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if os.Getppid() != parent {
				logger.Error("host process is gone; exiting", "old_parent", parent)
				os.Exit(3)
			}
		}
	}
}
