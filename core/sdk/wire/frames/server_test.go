package frames

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/logtest"
	"github.com/rlhost/rlhost/core/sdk/wire/rlhostpb"
)

// served is a running Serve on a fresh socket.
type served struct {
	sock string
	logs *logtest.Buffer
	stop context.CancelFunc
	done chan error // Serve's result
}

// handler answers one call of the lent-sandbox messages the tests use.
type handler = func(ctx context.Context, call *rlhostpb.LentCall) *rlhostpb.LentReply

// Client is the caller's end of a wire of those messages.
type Client = Conn[rlhostpb.LentCall, rlhostpb.LentReply, *rlhostpb.LentCall, *rlhostpb.LentReply]

// NewClient runs a Client on conn.
func NewClient(conn net.Conn) *Client {
	return NewConn[rlhostpb.LentCall, rlhostpb.LentReply](conn, "lent sandbox")
}

func serve(t *testing.T, h handler) *served {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &served{sock: sock, logs: &logtest.Buffer{}, stop: cancel, done: make(chan error, 1)}
	log := hclog.New(&hclog.LoggerOptions{Output: s.logs})
	go func() { s.done <- Serve(ctx, ln, "lent sandbox", h, log) }()
	t.Cleanup(func() {
		cancel()
		<-s.done
	})
	return s
}

func dial(t *testing.T, sock string) *Client {
	t.Helper()
	c, err := Dial[rlhostpb.LentCall, rlhostpb.LentReply](context.Background(), sock, "lent sandbox")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func info(id string) *rlhostpb.LentCall {
	return &rlhostpb.LentCall{Call: &rlhostpb.LentCall_Info{Info: &rlhostpb.SandboxID{Id: id}}}
}

func failWith(err error) *rlhostpb.LentReply {
	return &rlhostpb.LentReply{Result: &rlhostpb.LentReply_Error{Error: rlhostpb.ToLentError(err)}}
}

// echo answers Info with the id it names.
func echo(_ context.Context, c *rlhostpb.LentCall) *rlhostpb.LentReply {
	return &rlhostpb.LentReply{Result: &rlhostpb.LentReply_Info{Info: &rlhostpb.SandboxInfo{Id: c.GetInfo().GetId()}}}
}

// Error kinds cross the wire as they cross gRPC: sentinels and context
// errors still match, with the host's message.
func TestErrorsSurvive(t *testing.T) {
	cases := []struct {
		name string
		err  error
		is   error // nil: matches no sentinel
	}{
		{"not found", fmt.Errorf("sandbox x: %w", core.ErrNotFound), core.ErrNotFound},
		{"invalid path", fmt.Errorf("path ../x: %w", core.ErrInvalidPath), core.ErrInvalidPath},
		{"too large", fmt.Errorf("file f: %w", core.ErrTooLarge), core.ErrTooLarge},
		{"limit", fmt.Errorf("sandboxes: %w", core.ErrLimitReached), core.ErrLimitReached},
		{"unavailable", fmt.Errorf("backend: %w", core.ErrUnavailable), core.ErrUnavailable},
		{"cancelled", fmt.Errorf("exec: %w", context.Canceled), context.Canceled},
		{"deadline", fmt.Errorf("exec: %w", context.DeadlineExceeded), context.DeadlineExceeded},
		{"plain", errors.New("boom"), nil},
	}
	s := serve(t, func(_ context.Context, c *rlhostpb.LentCall) *rlhostpb.LentReply {
		for _, tc := range cases {
			if tc.name == c.GetInfo().GetId() {
				return failWith(tc.err)
			}
		}
		return nil
	})
	c := dial(t, s.sock)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Call(context.Background(), info(tc.name))
			switch {
			case err == nil:
				t.Fatal("no error")
			case tc.is != nil && !errors.Is(err, tc.is):
				t.Fatalf("%v lost its kind %v", err, tc.is)
			case tc.is == nil && errors.Is(err, core.ErrNotFound):
				t.Fatalf("a plain error became a sentinel: %v", err)
			case !strings.Contains(err.Error(), tc.err.Error()) && tc.is != core.ErrUnavailable:
				t.Fatalf("message changed: %q, want %q", err, tc.err)
			}
		})
	}
}

// Calls on one connection run at once and each gets its own reply, in
// whatever order they finish.
func TestCallsMultiplex(t *testing.T) {
	release := make(chan struct{})
	s := serve(t, func(ctx context.Context, c *rlhostpb.LentCall) *rlhostpb.LentReply {
		if c.GetInfo().GetId() == "slow" {
			<-release // answered only after "fast" was
		}
		return echo(ctx, c)
	})
	c := dial(t, s.sock)
	slow := make(chan error, 1)
	go func() {
		rep, err := c.Call(context.Background(), info("slow"))
		if err == nil && rep.GetInfo().GetId() != "slow" {
			err = fmt.Errorf("got the reply for %q", rep.GetInfo().GetId())
		}
		slow <- err
	}()
	for i := range 20 {
		id := fmt.Sprintf("fast%d", i)
		rep, err := c.Call(context.Background(), info(id))
		if err != nil || rep.GetInfo().GetId() != id {
			t.Fatalf("call %s: %v, %v", id, rep, err)
		}
	}
	close(release)
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
}

// A call whose context ends is cancelled on the host; so is every call of a
// connection that ends.
func TestCancellationReachesTheHost(t *testing.T) {
	cases := []struct {
		name string
		end  func(cancel context.CancelFunc, c *Client)
		want error // what the caller gets
	}{
		{"caller cancels", func(cancel context.CancelFunc, _ *Client) { cancel() }, context.Canceled},
		{"connection closes", func(_ context.CancelFunc, c *Client) { c.Close() }, core.ErrUnavailable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			started, stopped := make(chan struct{}), make(chan struct{})
			s := serve(t, func(ctx context.Context, c *rlhostpb.LentCall) *rlhostpb.LentReply {
				close(started)
				<-ctx.Done()
				close(stopped)
				return failWith(ctx.Err())
			})
			c := dial(t, s.sock)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := c.Call(ctx, info("x"))
				done <- err
			}()
			<-started
			tc.end(cancel, c)
			if err := <-done; !errors.Is(err, tc.want) {
				t.Fatalf("caller got %v, want %v", err, tc.want)
			}
			<-stopped
		})
	}
}

// A connection that sends garbage is closed and logged; the host goes on
// serving its other connections and new ones.
func TestBadFramesCloseOnlyTheirConnection(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	cases := []struct {
		name string
		send func(t *testing.T, conn net.Conn)
	}{
		{"length over MaxSize", func(t *testing.T, conn net.Conn) { conn.Write(header(MaxSize + 1)) }},
		{"not protobuf", func(t *testing.T, conn net.Conn) { conn.Write(append(header(3), 0xff, 0xff, 0xff)) }},
		{"truncated frame then close", func(t *testing.T, conn net.Conn) {
			conn.Write(append(header(100), 1, 2))
			conn.(*net.UnixConn).CloseWrite()
		}},
		{"id reused while its call runs", func(t *testing.T, conn net.Conn) {
			call := info("block")
			call.Id = 9
			for range 2 {
				if err := Write(conn, call); err != nil {
					t.Fatal(err)
				}
			}
		}},
	}
	s := serve(t, func(ctx context.Context, c *rlhostpb.LentCall) *rlhostpb.LentReply {
		if c.GetInfo().GetId() == "block" {
			select {
			case <-block:
			case <-ctx.Done():
			}
		}
		return echo(ctx, c)
	})
	good := dial(t, s.sock)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("unix", s.sock)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			tc.send(t, conn)
			// The host closes the connection: reading ends without a reply.
			if n, err := io.Copy(io.Discard, conn); err != nil || n != 0 {
				t.Fatalf("read %d bytes, %v; want the connection closed", n, err)
			}
			if _, err := good.Call(context.Background(), info("still")); err != nil {
				t.Fatalf("another connection broke: %v", err)
			}
			if _, err := dial(t, s.sock).Call(context.Background(), info("new")); err != nil {
				t.Fatalf("a new connection fails: %v", err)
			}
		})
	}
	if got := strings.Count(s.logs.String(), "lent sandbox connection closed"); got != len(cases) {
		t.Fatalf("%d connections logged as closed, want %d:\n%s", got, len(cases), s.logs)
	}
}

// A call that panics on the host fails alone.
func TestPanicFailsTheCall(t *testing.T) {
	s := serve(t, func(ctx context.Context, c *rlhostpb.LentCall) *rlhostpb.LentReply {
		if c.GetInfo().GetId() == "panic" {
			panic("bad handler")
		}
		return echo(ctx, c)
	})
	c := dial(t, s.sock)
	if _, err := c.Call(context.Background(), info("panic")); err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Fatalf("got %v, want the panic as an error", err)
	}
	if _, err := c.Call(context.Background(), info("ok")); err != nil {
		t.Fatal(err)
	}
}

// When Serve's context ends, every connection closes, callers see the host
// as unavailable, and no goroutine of the server is left.
func TestServeStopsCleanly(t *testing.T) {
	s := serve(t, echo)
	var clients []*Client
	for range 3 {
		c := dial(t, s.sock)
		if _, err := c.Call(context.Background(), info("x")); err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	s.stop()
	if err := <-s.done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	s.done <- nil // for the cleanup
	for _, c := range clients {
		if _, err := c.Call(context.Background(), info("x")); !errors.Is(err, core.ErrUnavailable) {
			t.Fatalf("call after the host stopped: %v, want unavailable", err)
		}
		if !c.Broken() {
			t.Fatal("client not broken after the host stopped")
		}
	}
	waitNoGoroutines(t, "frames.serveConn", "frames.(*Conn")
}

// waitNoGoroutines waits until no goroutine runs any of fns; the deadline
// only stops a hung test.
func waitNoGoroutines(t *testing.T, fns ...string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		stacks := string(buf[:runtime.Stack(buf, true)])
		left := ""
		for _, fn := range fns {
			if strings.Contains(stacks, fn+"(") {
				left = fn
			}
		}
		if left == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a goroutine is still in %s", left)
		}
	}
}

// failingListener fails the Accepts after the first with errs, in turn,
// then accepts as usual.
type failingListener struct {
	net.Listener
	mu   sync.Mutex
	n    int
	errs []error
}

func (l *failingListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	l.n++
	if l.n > 1 && len(l.errs) > 0 {
		err := l.errs[0]
		l.errs = l.errs[1:]
		l.mu.Unlock()
		return nil, err
	}
	l.mu.Unlock()
	return l.Listener.Accept()
}

// A shortage of fds stops accepting only for a while; any other accept
// failure ends the socket and its connections at once, rather than when
// the last peer lets go.
func TestAcceptFailures(t *testing.T) {
	cases := []struct {
		name      string
		errs      []error
		keepsOpen bool
	}{
		{"out of fds, twice", []error{syscall.EMFILE, syscall.ENFILE}, true},
		{"a broken socket", []error{syscall.EINVAL}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "s.sock")
			ln, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			fl := &failingListener{Listener: ln, errs: tc.errs}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- Serve(ctx, fl, "test", echo, hclog.NewNullLogger()) }()
			first := dial(t, sock) // the first Accept succeeds; the next fail
			if tc.keepsOpen {
				if _, err := first.Call(ctx, info("a")); err != nil {
					t.Fatal(err)
				}
				second := dial(t, sock)
				if _, err := second.Call(ctx, info("b")); err != nil {
					t.Errorf("a connection after the shortage: %v", err)
				}
				if _, err := first.Call(ctx, info("c")); err != nil {
					t.Errorf("the first connection after the shortage: %v", err)
				}
				return
			}
			select {
			case err := <-done:
				if !errors.Is(err, syscall.EINVAL) {
					t.Errorf("Serve returned %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Serve waited for its open connection")
			}
			if _, err := first.Call(ctx, info("c")); err == nil {
				t.Error("the connection outlived its socket")
			}
		})
	}
}

// A peer that goes away with replies it never read (a plugin shut down
// while its calls were answered) resets the connection. That is a hang-up,
// as a clean close is: nothing is logged, and serving the connection ends
// without an error.
func TestPeerResetIsAHangUp(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	conns := make([]net.Conn, 2)
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), fmt.Sprintf("pair-%d", i))
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	server, peer := conns[0], conns[1]
	logs := &logtest.Buffer{}
	done := make(chan error, 1)
	go func() {
		done <- serveConn(context.Background(), server, "lent sandbox", echo, hclog.New(&hclog.LoggerOptions{Output: logs}))
	}()
	if err := Write(peer, info("a")); err != nil {
		t.Fatal(err)
	}
	// Wait for the reply without reading it, then go away.
	raw, err := peer.(*net.UnixConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var peekErr error
	if err := raw.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, peekErr = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK)
		return peekErr != syscall.EAGAIN
	}); err != nil || peekErr != nil {
		t.Fatalf("peek the reply: %v, %v", err, peekErr)
	}
	peer.Close()
	if err := <-done; err != nil {
		t.Errorf("serving a reset connection ended with %v", err)
	}
	if logs.String() != "" {
		t.Errorf("a peer's reset was logged:\n%s", logs.String())
	}
}
