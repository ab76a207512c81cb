package pluginbase

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// OrphanShutdownTimeout bounds the clean-up a plugin does when its host
// dies without calling Shutdown (a SIGKILLed host), e.g. deleting cloud
// sandboxes that would otherwise run until their TTL.
const OrphanShutdownTimeout = 30 * time.Second

// Serve runs p as a plugin of the given kind until the host kills it. It
// logs hclog JSON to stderr, which the host re-logs under the plugin's name.
// onOrphaned, if not nil, runs once when the host is gone (the host's
// parent-death SIGTERM, or the parent watch noticing), before the process
// exits.
func Serve(kind string, p plugin.Plugin, onOrphaned func(ctx context.Context)) {
	// Once the host is gone, our stderr is a broken pipe, and Go kills a
	// process that writes to a broken fd 1 or 2 with SIGPIPE: the first log
	// line of the clean-up below would end it. Handling SIGPIPE turns such
	// writes into EPIPE errors. (Notify, not Ignore: an ignored signal would
	// be inherited by every program the plugin starts.)
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	logger := NewLogger(kind)
	var once sync.Once
	exit := func(why string) {
		once.Do(func() {
			logger.Error("host process is gone; cleaning up and exiting", "reason", why)
			if onOrphaned != nil {
				ctx, cancel := context.WithTimeout(context.Background(), OrphanShutdownTimeout)
				onOrphaned(ctx)
				cancel()
			}
			os.Exit(3)
		})
	}
	// The host starts plugins with a parent-death SIGTERM; go-plugin itself
	// ignores SIGINT (a terminal's Ctrl-C reaches the whole process group,
	// and the host shuts plugins down in order).
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	go func() {
		<-term
		exit("SIGTERM")
	}()
	go WatchParent(context.Background(), 500*time.Millisecond, func() { exit("parent changed") })
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: HandshakeConfig(),
		Plugins:         map[string]plugin.Plugin{kind: p},
		GRPCServer:      NewGRPCServer,
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

// WatchParent calls gone when the process's parent changes. go-plugin sets
// no parent-death signal of its own, and the host's can be lost (it follows
// the forking thread), so plugins also watch.
func WatchParent(ctx context.Context, every time.Duration, gone func()) {
	parent := os.Getppid()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if os.Getppid() != parent {
				gone()
				return
			}
		}
	}
}

// MaxMessageBytes bounds one gRPC message between host and plugins. gRPC's
// 4 MiB default is too small for files and program outputs that sandboxes
// legitimately move (the backends cap those themselves).
const MaxMessageBytes = 256 << 20

// WindowBytes is the fixed HTTP/2 flow-control window, per stream and per
// connection, on every host-plugin connection. A fixed window switches off
// gRPC's bandwidth estimator, which otherwise answers nearly every message
// with a window update and a ping that the peer must wake up to
// acknowledge: two extra packets and a wake-up in each process per call,
// on the latency path of every sandbox call an environment makes. 16 MiB
// is the most the estimator would have grown the window to.
const WindowBytes = 16 << 20

// NewGRPCServer makes a gRPC server with rlhost's message limits and fixed
// flow-control windows; plugins and the host's own servers both use it.
func NewGRPCServer(opts []grpc.ServerOption) *grpc.Server {
	return grpc.NewServer(append(opts,
		grpc.MaxRecvMsgSize(MaxMessageBytes), grpc.MaxSendMsgSize(MaxMessageBytes),
		grpc.StaticStreamWindowSize(WindowBytes), grpc.StaticConnWindowSize(WindowBytes))...)
}

// DialOptions are the client side of NewGRPCServer's settings, for the
// host's connections to plugins.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithStaticStreamWindowSize(WindowBytes), grpc.WithStaticConnWindowSize(WindowBytes),
	}
}

// UntilShutdown returns when conn is closed (go-plugin closes it when it
// kills the plugin) or ctx ends: the host side's watch on a plugin's life.
func UntilShutdown(ctx context.Context, conn *grpc.ClientConn) {
	for s := conn.GetState(); s != connectivity.Shutdown; s = conn.GetState() {
		if !conn.WaitForStateChange(ctx, s) {
			return
		}
	}
}
