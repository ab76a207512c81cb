package envplugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/sdk/pluginbase"
	"github.com/rlhost/rlhost/core/sdk/wire/frames"
	"github.com/rlhost/rlhost/core/sdk/wire/rlhostpb"
)

// The episode socket: the plugin serves NewEpisode, Step and End, the calls
// on every turn's latency path, as frames (core/sdk/wire/frames) on a Unix
// socket of its own, beside gRPC, and names it in Describe. The host sends
// those calls there, on one connection, and everything else over gRPC; a
// frame round trip takes fewer packets and goroutine hand-offs than
// gRPC's. A plugin that names no socket (the Python SDK, an older Go one)
// is called over gRPC alone.

// episodeWire names the wire in logs and errors.
const episodeWire = "env episode"

// envConn is the host's end of the connection to an episode socket.
type envConn = frames.Conn[rlhostpb.EnvCall, rlhostpb.EnvReply, *rlhostpb.EnvCall, *rlhostpb.EnvReply]

// episodeSocket is the plugin side: the socket, opened at the first
// Describe in a directory only this user can enter, and served until
// close, which removes it.
type episodeSocket struct {
	log    hclog.Logger
	handle func(context.Context, *rlhostpb.EnvCall) *rlhostpb.EnvReply

	mu     sync.Mutex
	path   string        // "" until opened
	stop   func()        // ends Serve
	done   chan struct{} // closed once Serve returned and the directory is gone
	closed bool          // after close, no socket is opened again
}

// open starts serving the socket if it is not yet, and returns its path.
// A socket that cannot be opened is logged and left out: the host then
// uses gRPC.
func (e *episodeSocket) open() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return "" // removed: the host must use gRPC
	}
	if e.path != "" {
		return e.path
	}
	ln, sock, err := frames.ListenPrivate(frames.EpisodeSocket)
	if err != nil {
		e.log.Warn("no episode socket; the host will use gRPC", "error", err)
		return ""
	}
	dir := filepath.Dir(sock)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := frames.Serve(ctx, ln, episodeWire, e.handle, e.log); err != nil {
			e.log.Error("episode socket failed", "error", err)
		}
		os.RemoveAll(dir)
	}()
	e.path, e.stop, e.done = sock, cancel, done
	return sock
}

// close stops serving, cancelling the calls still running on the socket,
// and removes it.
func (e *episodeSocket) close() {
	e.mu.Lock()
	e.closed = true
	stop, done := e.stop, e.done
	e.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// handleEpisode answers one call on the episode socket with the gRPC
// server's own method, so both wires behave alike: the same errors,
// converted as gRPC converts them, and a panic fails the call as
// pluginbase.Recovering fails a gRPC call.
func (s *server) handleEpisode(ctx context.Context, c *rlhostpb.EnvCall) *rlhostpb.EnvReply {
	if t := c.GetTimeoutNs(); t > 0 { // the host's deadline, as gRPC passes it
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(t))
		defer cancel()
	}
	obs, err := s.episodeCall(ctx, c)
	if err != nil {
		return &rlhostpb.EnvReply{Result: &rlhostpb.EnvReply_Error{Error: rlhostpb.ToLentError(err)}}
	}
	return &rlhostpb.EnvReply{Result: &rlhostpb.EnvReply_Observation{Observation: obs}}
}

func (s *server) episodeCall(ctx context.Context, c *rlhostpb.EnvCall) (obs *rlhostpb.Observation, err error) {
	method := rlhostpb.Environment_ServiceDesc.ServiceName + "/"
	defer func() {
		if r := recover(); r != nil {
			obs, err = nil, pluginbase.Panicked(s.log, method, r)
		}
	}()
	switch x := c.GetCall().(type) {
	case *rlhostpb.EnvCall_NewEpisode:
		method += "NewEpisode"
		return s.NewEpisode(ctx, x.NewEpisode)
	case *rlhostpb.EnvCall_Step:
		method += "Step"
		return s.Step(ctx, x.Step)
	case *rlhostpb.EnvCall_End:
		method += "End"
		return s.End(ctx, x.End)
	default: // a call this plugin does not know (a newer host)
		return nil, fmt.Errorf("episode call %T: %w", x, core.ErrUnimplemented)
	}
}

// episodeConn is the host side: the connection to the plugin's episode
// socket, made once and made again at the next call if it broke (while the
// plugin lives).
type episodeConn struct {
	life context.Context // ends with the plugin client
	path string

	mu       sync.Mutex // held across a dial, so concurrent calls dial once
	conn     *envConn
	stopConn func() bool // unhooks conn's close from life
}

func newEpisodeConn(life context.Context, path string) *episodeConn {
	e := &episodeConn{life: life, path: path}
	context.AfterFunc(life, func() { frames.RemoveSocket(e.path) })
	return e
}

// get returns the live connection, dialling if there is none. A failed
// dial wraps ErrUnavailable, as gRPC's would: the plugin is likely gone.
func (e *episodeConn) get(ctx context.Context) (*envConn, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.conn != nil && !e.conn.Broken() {
		return e.conn, nil
	}
	if e.life.Err() != nil {
		return nil, fmt.Errorf("env plugin is gone: %w", core.ErrUnavailable)
	}
	c, err := frames.Dial[rlhostpb.EnvCall, rlhostpb.EnvReply](ctx, e.path, episodeWire)
	if err != nil {
		return nil, fmt.Errorf("%w: %w: %w", err, errEpisodeDial, core.ErrUnavailable)
	}
	if e.stopConn != nil {
		e.stopConn()
	}
	e.conn, e.stopConn = c, context.AfterFunc(e.life, func() { c.Close() })
	return c, nil
}

// errEpisodeDial marks a call that never reached the episode socket: the
// client then makes it over gRPC, which a live plugin still serves (its
// socket may have been removed under it, by a cleaner of the temporary
// directory say) and which tells a dead one apart as before.
var errEpisodeDial = errors.New("cannot connect to the env plugin's episode socket")

// call sends call and returns the observation it is answered with; errors
// come as Conn.Call gives them (sentinels kept, ErrUnavailable for a
// connection lost).
func (e *episodeConn) call(ctx context.Context, call *rlhostpb.EnvCall) (*rlhostpb.Observation, error) {
	conn, err := e.get(ctx)
	if err != nil {
		return nil, err
	}
	if d, ok := ctx.Deadline(); ok {
		call.TimeoutNs = max(int64(time.Until(d)), 1)
	}
	rep, err := conn.Call(ctx, call)
	if err != nil {
		return nil, err
	}
	obs := rep.GetObservation()
	if obs == nil { // a result this host does not know (a newer plugin)
		return nil, fmt.Errorf("env plugin answered %T, not an observation", rep.GetResult())
	}
	return obs, nil
}
