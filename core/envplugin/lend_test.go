package envplugin

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/pluginbase"
	rlhostpb "github.com/rlhost/rlhost/core/proto"
	"github.com/rlhost/rlhost/core/schema"
)

// memSandbox answers every call; Exec blocks until its context ends when
// block is set, and reports that it started on started.
type memSandbox struct {
	id      string
	block   bool
	started chan struct{}
}

func (s *memSandbox) ID() string { return s.id }

func (s *memSandbox) Exec(ctx context.Context, _ core.ExecRequest) (core.ExecResult, error) {
	if s.block {
		close(s.started)
		<-ctx.Done()
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
	lent map[string]*sandboxClient // by episode id
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
		e.lent = map[string]*sandboxClient{}
	}
	if sc, ok := ep.Sandbox.(*sandboxClient); ok {
		e.lent[ep.ID] = sc
	}
	return keepSession{}, Observation{}, nil
}

func (e *keepEnv) sandbox(t *testing.T, episode string) *sandboxClient {
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
	gc, _ := plugin.TestPluginGRPCConn(t, false, map[string]plugin.Plugin{pluginbase.KindEnv: &Plugin{Impl: env}})
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

// sandboxCalls are every method of the lent Sandbox service, each naming
// the sandbox id it is given.
var sandboxCalls = []struct {
	name string
	call func(ctx context.Context, rpc rlhostpb.SandboxClient, id string) error
}{
	{"Info", func(ctx context.Context, rpc rlhostpb.SandboxClient, id string) error {
		_, err := rpc.Info(ctx, &rlhostpb.SandboxID{Id: id})
		return err
	}},
	{"Exec", func(ctx context.Context, rpc rlhostpb.SandboxClient, id string) error {
		_, err := rpc.Exec(ctx, &rlhostpb.ExecRequest{SandboxId: id, Command: [][]byte{[]byte("true")}})
		return err
	}},
	{"ReadFile", func(ctx context.Context, rpc rlhostpb.SandboxClient, id string) error {
		_, err := rpc.ReadFile(ctx, &rlhostpb.ReadFileRequest{SandboxId: id, Path: []byte("f")})
		return err
	}},
	{"WriteFile", func(ctx context.Context, rpc rlhostpb.SandboxClient, id string) error {
		_, err := rpc.WriteFile(ctx, &rlhostpb.WriteFileRequest{SandboxId: id, Path: []byte("f")})
		return err
	}},
	{"ListFiles", func(ctx context.Context, rpc rlhostpb.SandboxClient, id string) error {
		_, err := rpc.ListFiles(ctx, &rlhostpb.ListFilesRequest{SandboxId: id, Path: []byte(".")})
		return err
	}},
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
	rpc := env.sandbox(t, "live").rpc // the plugin's one connection to this client

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
				err := rlhostpb.FromStatus(m.call(ctx, rpc, tc.id))
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

// Every episode is lent its sandbox on the one broker id taken at the
// first, and reaches its own sandbox through it. (go-plugin lets the plugin
// dial an id only once, so a plugin that did not keep the connection would
// fail the second episode.)
func TestEpisodesShareOneBrokerConnection(t *testing.T) {
	ctx := context.Background()
	client, env, _ := serveKeep(t)
	var brokerID uint32
	for i := range 4 {
		ep, id := fmt.Sprintf("ep%d", i), fmt.Sprintf("sb%d", i%2)
		sess := start(t, client, ep, &memSandbox{id: id})
		bid := currentBrokerID(client)
		if brokerID == 0 {
			brokerID = bid
		} else if bid != brokerID {
			t.Fatalf("episode %s was lent its sandbox on broker id %d, the first on %d", ep, bid, brokerID)
		}
		sc := env.sandbox(t, ep)
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

func currentBrokerID(c *Client) uint32 {
	c.lend.mu.Lock()
	defer c.lend.mu.Unlock()
	if c.lend.cur == nil {
		return 0
	}
	return c.lend.cur.id
}

// A server no episode ever started on may never have reached the plugin
// (go-plugin drops an announcement not dialled within 5 s), so a failed
// start gives it up and the next episode is lent on a fresh one. Once an
// episode has started on a server, the plugin holds a connection to it and
// failed starts keep it.
func TestServerNeverStartedOnIsReplaced(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel() // a start that never reaches the plugin
	cases := []struct {
		name   string
		starts []bool // whether each start reaches the plugin
		// whether a lost start gives its server up
		givenUp bool
	}{
		{"first start lost", []bool{false, true}, true},
		{"every start lost so far", []bool{false, false, true}, true},
		{"a start lost after one succeeded", []bool{true, false, true}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client, env, _ := serveKeep(t)
			for i, reach := range tc.starts {
				ctx, ep := context.Background(), fmt.Sprintf("ep%d", i)
				if !reach {
					ctx = cancelled
				}
				sess, _, err := client.NewEpisode(ctx, Episode{ID: ep, Sandbox: &memSandbox{id: ep}})
				if reach != (err == nil) {
					t.Fatalf("start %d: %v", i, err)
				}
				if !reach {
					if givenUp := currentBrokerID(client) == 0; givenUp != tc.givenUp {
						t.Fatalf("start %d lost: server given up %v, want %v", i, givenUp, tc.givenUp)
					}
					continue
				}
				if _, err := env.sandbox(t, ep).Exec(context.Background(), core.ExecRequest{Command: []string{"true"}}); err != nil {
					t.Fatalf("episode %s cannot reach its sandbox: %v", ep, err)
				}
				if _, err := sess.End(context.Background(), core.FinishCancelled); err != nil {
					t.Fatal(err)
				}
			}
			// A server given up is stopped: only the one in use remains.
			waitGoroutines(t, "envplugin.(*lender).serve", 1)
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
// Sandbox server: its goroutine, and with it the listener, is gone.
func TestLenderStopsWithTheClient(t *testing.T) {
	client, _, gc := serveKeep(t)
	start(t, client, "ep", &memSandbox{id: "sb"})
	const serving = "envplugin.(*lender).serve"
	waitGoroutines(t, serving, 1)
	if err := gc.Close(); err != nil {
		t.Fatal(err)
	}
	waitGoroutines(t, serving, 0)
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

// brokerConns dials a broker id once, whoever asks, and forgets a failure.
func TestBrokerConnsDialOnce(t *testing.T) {
	cases := []struct {
		name    string
		ids     []uint32
		failing map[uint32]int // dials of an id that fail before one succeeds
		dials   int
	}{
		{"one id, many episodes", []uint32{7, 7, 7}, nil, 1},
		{"two ids", []uint32{7, 8, 7, 8}, nil, 2},
		{"a failed dial is retried", []uint32{7, 7, 7}, map[uint32]int{7: 1}, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			dials := 0
			b := newBrokerConns(func(id uint32) (*grpc.ClientConn, error) {
				mu.Lock()
				defer mu.Unlock()
				dials++
				if tc.failing[id] > 0 {
					tc.failing[id]--
					return nil, fmt.Errorf("no announcement for %d", id)
				}
				// A client that never connects: only its identity matters.
				c, err := grpc.NewClient("passthrough:///unused", grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					t.Fatal(err)
				}
				return c, nil
			})
			defer b.close()
			got := map[uint32]*grpc.ClientConn{}
			for _, id := range tc.ids {
				c, err := b.get(id)
				if err != nil {
					continue
				}
				if prev, ok := got[id]; ok && prev != c {
					t.Fatalf("id %d dialled again", id)
				}
				got[id] = c
			}
			if dials != tc.dials {
				t.Fatalf("%d dials, want %d", dials, tc.dials)
			}
		})
	}
}
