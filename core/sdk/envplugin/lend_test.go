package envplugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/protobuf/proto"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/core/sdk/pluginbase"
	"github.com/rlhost/rlhost/core/sdk/wire/frames"
	"github.com/rlhost/rlhost/core/sdk/wire/lend"
	"github.com/rlhost/rlhost/core/sdk/wire/rlhostpb"
)

// memSandbox answers every call; Exec blocks until its context ends when
// block is set, and reports that it started on started and returned on
// stopped.
type memSandbox struct {
	id      string
	block   bool
	started chan struct{}
	stopped chan struct{} // closed when a blocked Exec returns, if set
}

func (s *memSandbox) ID() string { return s.id }

func (s *memSandbox) Exec(ctx context.Context, _ core.ExecRequest) (core.ExecResult, error) {
	if s.block {
		close(s.started)
		<-ctx.Done()
		if s.stopped != nil {
			close(s.stopped)
		}
		return core.ExecResult{}, ctx.Err()
	}
	return core.ExecResult{Stdout: s.id}, nil
}

func (s *memSandbox) ReadFile(context.Context, string, int64) ([]byte, error) {
	return []byte(s.id), nil
}

func (s *memSandbox) WriteFile(context.Context, string, []byte, uint32) error { return nil }

func (s *memSandbox) ListFiles(context.Context, string) ([]core.FileInfo, error) {
	return []core.FileInfo{{Path: s.id}}, nil
}

// keepEnv keeps the plugin-side Sandbox of every episode it starts, so a
// test can act as a plugin that forges sandbox ids on its connection.
type keepEnv struct {
	mu   sync.Mutex
	lent map[string]*lend.Borrowed // by episode id
}

func (e *keepEnv) Info() pluginbase.Info {
	return pluginbase.Info{Name: "keep", Version: "1", Kind: pluginbase.KindEnv}
}

func (e *keepEnv) Configure(context.Context, schema.Config) schema.Diagnostics { return nil }

func (e *keepEnv) Tasks(context.Context) ([]core.Task, error) { return nil, nil }

func (e *keepEnv) NewEpisode(_ context.Context, ep Episode) (Session, Observation, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lent == nil {
		e.lent = map[string]*lend.Borrowed{}
	}
	if sc, ok := ep.Sandbox.(*lend.Borrowed); ok {
		e.lent[ep.ID] = sc
	}
	return keepSession{}, Observation{}, nil
}

func (e *keepEnv) sandbox(t *testing.T, episode string) *lend.Borrowed {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	sc := e.lent[episode]
	if sc == nil {
		t.Fatalf("episode %s got no sandbox", episode)
	}
	return sc
}

type keepSession struct{}

func (keepSession) Step(context.Context, core.Message) (Observation, error) {
	return Observation{Done: true}, nil
}

func (keepSession) End(context.Context, string) (Observation, error) { return Observation{}, nil }

// serveKeep serves a keepEnv in-process over real gRPC and the go-plugin
// broker; closing the returned go-plugin client closes the broker.
func serveKeep(t *testing.T) (*Client, *keepEnv, *plugin.GRPCClient) {
	t.Helper()
	env := &keepEnv{}
	p := &Plugin{Impl: env}
	t.Cleanup(func() { p.closeEpisodes(context.Background()) }) // removes the episode socket
	gc, _ := plugin.TestPluginGRPCConn(t, false, map[string]plugin.Plugin{pluginbase.KindEnv: p})
	t.Cleanup(func() { _ = gc.Close() })
	raw, err := gc.Dispense(pluginbase.KindEnv)
	if err != nil {
		t.Fatalf("dispense: %v", err)
	}
	return raw.(*Client), env, gc
}

func start(t *testing.T, c *Client, episode string, sb Sandbox) Session {
	t.Helper()
	sess, _, err := c.NewEpisode(context.Background(), Episode{ID: episode, Task: core.Task{ID: "t"}, Sandbox: sb})
	if err != nil {
		t.Fatalf("start %s: %v", episode, err)
	}
	return sess
}

// sandboxCalls are every call of the lent-sandbox wire, each naming the
// sandbox id it is given.
var sandboxCalls = []struct {
	name string
	call *rlhostpb.LentCall
}{
	{"Info", &rlhostpb.LentCall{Call: &rlhostpb.LentCall_Info{Info: &rlhostpb.SandboxID{}}}},
	{"Exec", &rlhostpb.LentCall{Call: &rlhostpb.LentCall_Exec{Exec: &rlhostpb.ExecRequest{Command: [][]byte{[]byte("true")}}}}},
	{"ReadFile", &rlhostpb.LentCall{Call: &rlhostpb.LentCall_ReadFile{ReadFile: &rlhostpb.ReadFileRequest{Path: []byte("f")}}}},
	{"WriteFile", &rlhostpb.LentCall{Call: &rlhostpb.LentCall_WriteFile{WriteFile: &rlhostpb.WriteFileRequest{Path: []byte("f")}}}},
	{"ListFiles", &rlhostpb.LentCall{Call: &rlhostpb.LentCall_ListFiles{ListFiles: &rlhostpb.ListFilesRequest{Path: []byte(".")}}}},
}

// naming returns a copy of call naming sandbox id.
func naming(call *rlhostpb.LentCall, id string) *rlhostpb.LentCall {
	c := proto.Clone(call).(*rlhostpb.LentCall)
	switch x := c.GetCall().(type) {
	case *rlhostpb.LentCall_Info:
		x.Info.Id = id
	case *rlhostpb.LentCall_Exec:
		x.Exec.SandboxId = id
	case *rlhostpb.LentCall_ReadFile:
		x.ReadFile.SandboxId = id
	case *rlhostpb.LentCall_WriteFile:
		x.WriteFile.SandboxId = id
	case *rlhostpb.LentCall_ListFiles:
		x.ListFiles.SandboxId = id
	}
	return c
}

// A plugin reaches a sandbox only while its episode is live on this client,
// whatever id it puts in a request on its (shared) connection.
func TestLentSandboxOnlyWhileItsEpisodeIsLive(t *testing.T) {
	ctx := context.Background()
	client, env, _ := serveKeep(t)
	other, _, _ := serveKeep(t)

	start(t, client, "live", &memSandbox{id: "sb-live"})
	start(t, client, "live2", &memSandbox{id: "sb-live2"})
	ended := start(t, client, "ended", &memSandbox{id: "sb-ended"})
	if _, err := ended.End(ctx, core.FinishCancelled); err != nil {
		t.Fatal(err)
	}
	start(t, other, "elsewhere", &memSandbox{id: "sb-other-client"})
	conn := env.sandbox(t, "live").Conn() // the plugin's one connection to this client

	cases := []struct {
		name, id string
		reach    bool
	}{
		{"its own live episode's sandbox", "sb-live", true},
		{"another live episode's sandbox", "sb-live2", true},
		{"the sandbox of an ended episode", "sb-ended", false},
		{"a sandbox lent on another client", "sb-other-client", false},
		{"an id never lent", "sb-nope", false},
		{"no id", "", false},
	}
	for _, tc := range cases {
		for _, m := range sandboxCalls {
			t.Run(tc.name+"/"+m.name, func(t *testing.T) {
				_, err := conn.Call(ctx, naming(m.call, tc.id))
				switch {
				case tc.reach && err != nil:
					t.Fatalf("%s of %q: %v", m.name, tc.id, err)
				case !tc.reach && !errors.Is(err, core.ErrNotFound):
					t.Fatalf("%s of %q: got %v, want NotFound", m.name, tc.id, err)
				case !tc.reach && !strings.Contains(err.Error(), fmt.Sprintf("%q is not lent to this environment", tc.id)):
					t.Fatalf("the error does not name the sandbox: %v", err)
				}
			})
		}
	}
}

// Every episode is lent its sandbox on the one socket opened at the first,
// and the plugin reaches it over the one connection it made then.
func TestEpisodesShareOneConnection(t *testing.T) {
	ctx := context.Background()
	client, env, _ := serveKeep(t)
	var sock string
	var conn *lend.Conn
	for i := range 4 {
		ep, id := fmt.Sprintf("ep%d", i), fmt.Sprintf("sb%d", i%2)
		sess := start(t, client, ep, &memSandbox{id: id})
		sc := env.sandbox(t, ep)
		if sock == "" {
			sock, conn = currentSocket(t, client), sc.Conn()
		} else if got := currentSocket(t, client); got != sock || sc.Conn() != conn {
			t.Fatalf("episode %s was lent its sandbox on %s (a new connection: %v), the first on %s", ep, got, sc.Conn() != conn, sock)
		}
		res, err := sc.Exec(ctx, core.ExecRequest{Command: []string{"true"}})
		if err != nil || res.Stdout != id {
			t.Fatalf("episode %s reached %q, %v; want its sandbox %s", ep, res.Stdout, err, id)
		}
		if _, err := sess.End(ctx, core.FinishCancelled); err != nil {
			t.Fatal(err)
		}
		if _, err := sc.Exec(ctx, core.ExecRequest{Command: []string{"true"}}); !errors.Is(err, core.ErrNotFound) {
			t.Fatalf("exec after End: %v, want NotFound", err)
		}
	}
}

// currentSocket is the socket the client lends on now: the one a
// probe sandbox is lent on (released at once).
func currentSocket(t *testing.T, c *Client) string {
	t.Helper()
	loan, err := c.socket.Lend(&memSandbox{id: "socket-probe"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer loan.Release(context.Background())
	return loan.Socket()
}

// A start that fails, whether or not it reached the plugin, leaves the
// socket as it is: the next episode is lent on it and reaches its sandbox.
func TestFailedStartKeepsTheSocket(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel() // a start that never reaches the plugin
	cases := []struct {
		name   string
		starts []bool // whether each start reaches the plugin
	}{
		{"first start lost", []bool{false, true}},
		{"every start lost so far", []bool{false, false, true}},
		{"a start lost after one succeeded", []bool{true, false, true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client, env, _ := serveKeep(t)
			var sock string
			for i, reach := range tc.starts {
				ctx, ep := context.Background(), fmt.Sprintf("ep%d", i)
				if !reach {
					ctx = cancelled
				}
				sess, _, err := client.NewEpisode(ctx, Episode{ID: ep, Sandbox: &memSandbox{id: ep}})
				if reach != (err == nil) {
					t.Fatalf("start %d: %v", i, err)
				}
				if sock == "" {
					sock = currentSocket(t, client)
				} else if got := currentSocket(t, client); got != sock {
					t.Fatalf("start %d moved the socket from %s to %s", i, sock, got)
				}
				if !reach {
					continue
				}
				if _, err := env.sandbox(t, ep).Exec(context.Background(), core.ExecRequest{Command: []string{"true"}}); err != nil {
					t.Fatalf("episode %s cannot reach its sandbox: %v", ep, err)
				}
				if _, err := sess.End(context.Background(), core.FinishCancelled); err != nil {
					t.Fatal(err)
				}
			}
			waitGoroutines(t, "lend.(*Socket).serve", 1)
		})
	}
}

// A call still running when its episode ends is cut off, as it was when
// each episode had a server of its own that End stopped.
func TestEndCancelsRunningSandboxCall(t *testing.T) {
	ctx := context.Background()
	client, env, _ := serveKeep(t)
	sb := &memSandbox{id: "sb-slow", block: true, started: make(chan struct{})}
	sess := start(t, client, "slow", sb)
	done := make(chan error, 1)
	go func() {
		_, err := env.sandbox(t, "slow").Exec(ctx, core.ExecRequest{Command: []string{"sleep"}})
		done <- err
	}()
	<-sb.started
	if _, err := sess.End(ctx, core.FinishCancelled); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("running exec after End: %v, want cancelled", err)
	}
}

// A plugin-side call whose context ends stops the host's work on it.
func TestCancelledCallStopsHostWork(t *testing.T) {
	client, env, _ := serveKeep(t)
	sb := &memSandbox{id: "sb-slow", block: true, started: make(chan struct{}), stopped: make(chan struct{})}
	start(t, client, "slow", sb)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := env.sandbox(t, "slow").Exec(ctx, core.ExecRequest{Command: []string{"sleep"}})
		done <- err
	}()
	<-sb.started
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled exec: %v, want cancelled", err)
	}
	<-sb.stopped // the host's Exec saw its context end
}

// Garbage on the lent-sandbox socket closes that connection only: the
// host, and the plugin's own connection, go on.
func TestGarbageOnTheSocketClosesOnlyItsConnection(t *testing.T) {
	client, env, _ := serveKeep(t)
	start(t, client, "ep", &memSandbox{id: "sb"})
	cases := []struct {
		name string
		data []byte
	}{
		{"a length past the limit", []byte{0xff, 0xff, 0xff, 0xff}},
		{"a body that is not a message", []byte{0, 0, 0, 2, 0xff, 0xff}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("unix", currentSocket(t, client))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.Write(tc.data); err != nil {
				t.Fatal(err)
			}
			if n, err := io.Copy(io.Discard, conn); n != 0 || err != nil {
				t.Fatalf("read %d bytes, %v; want the connection closed", n, err)
			}
			if _, err := env.sandbox(t, "ep").Exec(context.Background(), core.ExecRequest{Command: []string{"true"}}); err != nil {
				t.Fatalf("the plugin's connection broke too: %v", err)
			}
		})
	}
}

// One sandbox id cannot be lent to two live episodes at once: requests name
// only the sandbox, so the two leases could not be told apart.
func TestSandboxLentTwiceAtOnceIsRefused(t *testing.T) {
	ctx := context.Background()
	client, _, _ := serveKeep(t)
	first := start(t, client, "a", &memSandbox{id: "sb"})
	if _, _, err := client.NewEpisode(ctx, Episode{ID: "b", Sandbox: &memSandbox{id: "sb"}}); err == nil {
		t.Fatal("a sandbox was lent to two live episodes")
	}
	if _, err := first.End(ctx, core.FinishCancelled); err != nil {
		t.Fatal(err)
	}
	start(t, client, "c", &memSandbox{id: "sb"})
}

// Closing the plugin client (what killing the plugin does) stops the lent
// sandbox socket: its goroutine is gone, and so is the socket's directory.
func TestLenderStopsWithTheClient(t *testing.T) {
	client, _, gc := serveKeep(t)
	start(t, client, "ep", &memSandbox{id: "sb"})
	const serving = "lend.(*Socket).serve"
	waitGoroutines(t, serving, 1)
	dir := filepath.Dir(currentSocket(t, client))
	if err := gc.Close(); err != nil {
		t.Fatal(err)
	}
	waitGoroutines(t, serving, 0)
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the socket's directory %s is still there: %v", dir, err)
	}
	if _, _, err := client.NewEpisode(context.Background(), Episode{ID: "late", Sandbox: &memSandbox{id: "sb2"}}); err == nil {
		t.Fatal("a sandbox was lent after the client closed")
	}
}

// The socket is in a directory no other user can enter.
func TestLentSocketIsPrivate(t *testing.T) {
	client, _, _ := serveKeep(t)
	start(t, client, "ep", &memSandbox{id: "sb"})
	fi, err := os.Stat(filepath.Dir(currentSocket(t, client)))
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		t.Fatalf("socket directory mode %v, want 0700", perm)
	}
}

// waitGoroutines waits until n goroutines are in fn; the deadline only
// stops a hung test.
func waitGoroutines(t *testing.T, fn string, n int) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		got := strings.Count(string(buf[:runtime.Stack(buf, true)]), fn+"(")
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines in %s, want %d", got, fn, n)
		}
	}
}

// lendConns connects to a socket once, whoever asks, forgets a failure and
// replaces a connection that broke.
func TestLendConnsDialOnce(t *testing.T) {
	cases := []struct {
		name    string
		socks   []string
		failing map[string]int // dials of a socket that fail before one succeeds
		breakAt int            // break the connection after this many gets; 0: never
		dials   int
	}{
		{"one socket, many episodes", []string{"a", "a", "a"}, nil, 0, 1},
		{"two sockets", []string{"a", "b", "a", "b"}, nil, 0, 2},
		{"a failed dial is retried", []string{"a", "a", "a"}, map[string]int{"a": 1}, 0, 2},
		{"a broken connection is replaced", []string{"a", "a", "a"}, nil, 2, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dials := 0
			b := newLendConns(func(_ context.Context, sock string) (*lend.Conn, error) {
				dials++
				if tc.failing[sock] > 0 {
					tc.failing[sock]--
					return nil, fmt.Errorf("no socket %s", sock)
				}
				// A client whose peer never answers: only its identity matters.
				c1, c2 := net.Pipe()
				t.Cleanup(func() { c2.Close() })
				return lend.NewConn(c1), nil
			})
			defer b.close()
			got := map[string]*lend.Conn{}
			for i, sock := range tc.socks {
				c, err := b.get(context.Background(), sock)
				if err != nil {
					continue
				}
				if prev, ok := got[sock]; ok && prev != c && !prev.Broken() {
					t.Fatalf("%s dialled again", sock)
				}
				got[sock] = c
				if i+1 == tc.breakAt {
					c.Close()
				}
			}
			if dials != tc.dials {
				t.Fatalf("%d dials, want %d", dials, tc.dials)
			}
		})
	}
}

// leasedSandbox is a memSandbox its backend lends itself, on sock.
type leasedSandbox struct {
	memSandbox
	lease lend.Lease
}

func (s *leasedSandbox) Lease() lend.Lease { return s.lease }

// A sandbox its backend lends is lent on the backend's socket, with its
// token in every call, to a plugin that carries tokens; to one that does
// not (an older SDK), and for a sandbox with no lease, the host lends it on
// its own socket as before.
func TestBackendLentSandboxGoesToTheBackend(t *testing.T) {
	ctx := context.Background()
	// The backend's socket: answers each call with the token it carried.
	dir := t.TempDir()
	ln, err := net.Listen("unix", filepath.Join(dir, "backend.sock"))
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	go frames.Serve(sctx, ln, "backend", func(_ context.Context, c *rlhostpb.LentCall) *rlhostpb.LentReply {
		return &rlhostpb.LentReply{Result: &rlhostpb.LentReply_Exec{Exec: &rlhostpb.ExecResult{Stdout: append([]byte("backend "), c.GetToken()...)}}}
	}, hclog.NewNullLogger())
	lease := lend.NewLease(ln.Addr().String(), []byte("tok-1"))

	cases := []struct {
		name   string
		tokens bool // the plugin declares lent_tokens
		sb     Sandbox
		want   string
	}{
		{"leased, plugin carries tokens", true, &leasedSandbox{memSandbox{id: "sb-a"}, lease}, "backend tok-1"},
		{"leased, older plugin", false, &leasedSandbox{memSandbox{id: "sb-b"}, lease}, "sb-b"},
		{"a zero lease", true, &leasedSandbox{memSandbox{id: "sb-c"}, lend.Lease{}}, "sb-c"},
		{"not leased", true, &memSandbox{id: "sb-d"}, "sb-d"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client, env, _ := serveKeep(t)
			if !client.tokens {
				t.Fatal("the Go SDK does not declare lent_tokens")
			}
			client.tokens = tc.tokens
			sess := start(t, client, "e", tc.sb)
			res, err := env.sandbox(t, "e").Exec(ctx, core.ExecRequest{Command: []string{"true"}})
			if err != nil || res.Stdout != tc.want {
				t.Errorf("exec answered %q, %v; want %q", res.Stdout, err, tc.want)
			}
			if _, err := sess.End(ctx, core.FinishCancelled); err != nil {
				t.Fatal(err)
			}
		})
	}
}
