package envplugin

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/core/sdk/pluginbase"
	"github.com/rlhost/rlhost/core/sdk/wire/frames"
	"github.com/rlhost/rlhost/core/sdk/wire/rlhostpb"
)

// wireEnv records, for every episode call, whether it came over gRPC (the
// gRPC server puts the method in the context) and what deadline it had.
// Its sessions' Step acts on the reply: "block" waits for its context to
// end, "hang" until release is closed, whatever its context, "panic"
// panics, "missing" fails with NotFound; anything else returns at once.
type wireEnv struct {
	mu       sync.Mutex
	calls    []string // "NewEpisode grpc", "Step frames", ...
	deadline map[string]bool
	started  chan struct{} // a blocking Step began
	ended    chan error    // a blocking Step's context ended, with its error
	release  chan struct{} // ends hanging Steps
}

func newWireEnv() *wireEnv {
	return &wireEnv{deadline: map[string]bool{}, started: make(chan struct{}, 1), ended: make(chan error, 1), release: make(chan struct{})}
}

func (e *wireEnv) record(ctx context.Context, call string) {
	wire := "frames"
	if _, ok := grpc.Method(ctx); ok {
		wire = "grpc"
	}
	_, hasDeadline := ctx.Deadline()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.calls = append(e.calls, call+" "+wire)
	e.deadline[call] = hasDeadline
}

func (e *wireEnv) recorded() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.calls...)
}

func (e *wireEnv) Info() pluginbase.Info {
	return pluginbase.Info{Name: "wire", Version: "1", Kind: pluginbase.KindEnv, NoSandbox: true}
}

func (e *wireEnv) Configure(context.Context, schema.Config) schema.Diagnostics { return nil }

func (e *wireEnv) Tasks(context.Context) ([]core.Task, error) { return nil, nil }

func (e *wireEnv) NewEpisode(ctx context.Context, ep Episode) (Session, Observation, error) {
	e.record(ctx, "NewEpisode")
	return &wireSession{e: e}, Observation{Messages: []core.Message{{Role: core.RoleUser, Content: ep.Task.Prompt}}}, nil
}

type wireSession struct{ e *wireEnv }

func (s *wireSession) Step(ctx context.Context, reply core.Message) (Observation, error) {
	s.e.record(ctx, "Step")
	switch reply.Content {
	case "block":
		s.e.started <- struct{}{}
		<-ctx.Done()
		s.e.ended <- ctx.Err()
		return Observation{}, ctx.Err()
	case "hang":
		s.e.started <- struct{}{}
		<-s.e.release
	case "panic":
		var m map[string]int
		m["x"]++
	case "missing":
		return Observation{}, core.ErrNotFound
	}
	return Observation{Reward: 1, Metrics: map[string]float64{"len": float64(len(reply.Content))}}, nil
}

func (s *wireSession) End(ctx context.Context, reason string) (Observation, error) {
	s.e.record(ctx, "End")
	return Observation{Info: map[string]string{"reason": reason}}, nil
}

// grpcOnly is a plugin that serves no episode socket, as the Python SDK and
// Go plugins built before it do.
type grpcOnly struct{ Plugin }

func (p *grpcOnly) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	srv := newServer(p.Impl, hclog.NewNullLogger())
	srv.episodes.closed = true
	s.RegisterService(pluginbase.Recovering(&rlhostpb.Environment_ServiceDesc, hclog.NewNullLogger()), srv)
	return nil
}

// wires are the two ways the host reaches an env plugin's episodes.
var wires = []struct {
	name   string // what wireEnv records
	plugin func(Environment) plugin.Plugin
}{
	{"frames", func(env Environment) plugin.Plugin { return &Plugin{Impl: env, Logger: hclog.NewNullLogger()} }},
	{"grpc", func(env Environment) plugin.Plugin { return &grpcOnly{Plugin{Impl: env}} }},
}

// serveWire serves env in-process as p does and returns the host's client;
// the plugin's socket is removed when the test ends.
func serveWire(t *testing.T, p plugin.Plugin) (*Client, *plugin.GRPCClient) {
	t.Helper()
	if p, ok := p.(*Plugin); ok { // its socket, whatever the test did
		t.Cleanup(func() { p.closeEpisodes(context.Background()) })
	}
	gc, _ := plugin.TestPluginGRPCConn(t, false, map[string]plugin.Plugin{pluginbase.KindEnv: p})
	t.Cleanup(func() { _ = gc.Close() })
	raw, err := gc.Dispense(pluginbase.KindEnv)
	if err != nil {
		t.Fatalf("dispense: %v", err)
	}
	return raw.(*Client), gc
}

// Episode calls go on the episode socket when the plugin serves one, and
// over gRPC when it does not; either way they behave alike: observations,
// the caller's deadline, errors with their sentinel, a panic failing the
// call alone, and a cancelled call cancelling the env's work.
func TestEpisodeCallsOnBothWires(t *testing.T) {
	for _, w := range wires {
		t.Run(w.name, func(t *testing.T) {
			env := newWireEnv()
			client, _ := serveWire(t, w.plugin(env))
			if (client.eps != nil) != (w.name == "frames") {
				t.Fatalf("episode socket in use: %v", client.eps != nil)
			}
			ctx := context.Background()
			sess, obs, err := client.NewEpisode(ctx, Episode{ID: "e", Task: core.Task{ID: "t", Prompt: "hello"}})
			if err != nil || len(obs.Messages) != 1 || obs.Messages[0].Content != "hello" {
				t.Fatalf("new episode: %+v, %v", obs, err)
			}
			say := func(ctx context.Context, s string) (Observation, error) {
				return sess.Step(ctx, core.Message{Role: core.RoleAssistant, Content: s})
			}

			dctx, cancel := context.WithTimeout(ctx, time.Minute)
			obs, err = say(dctx, "four")
			cancel()
			if err != nil || obs.Reward != 1 || obs.Metrics["len"] != 4 {
				t.Fatalf("step: %+v, %v", obs, err)
			}
			env.mu.Lock()
			deadline := env.deadline["Step"]
			env.mu.Unlock()
			if !deadline {
				t.Error("the env's Step did not get the caller's deadline")
			}

			cases := []struct {
				reply string
				check func(error) bool
				want  string
			}{
				{"missing", func(err error) bool { return errors.Is(err, core.ErrNotFound) }, "NotFound"},
				{"panic", func(err error) bool {
					return err != nil && strings.Contains(err.Error(), "plugin panicked in rlhost.v1.Environment/Step") &&
						strings.Contains(err.Error(), "assignment to entry in nil map")
				}, "the panic named"},
			}
			for _, tc := range cases {
				if _, err := say(ctx, tc.reply); !tc.check(err) || !strings.Contains(err.Error(), "step episode e") {
					t.Errorf("step %q: %v, want %s", tc.reply, err, tc.want)
				}
			}
			if _, err := say(ctx, "after"); err != nil {
				t.Errorf("a step after the failures: %v", err)
			}

			cctx, cancelStep := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				_, err := say(cctx, "block")
				done <- err
			}()
			<-env.started
			cancelStep()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("cancelled step: %v, want Canceled", err)
			}
			select {
			case err := <-env.ended:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("the env's step ended with %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the env's step still runs after the host cancelled it")
			}

			obs, err = sess.End(ctx, core.FinishCancelled)
			if err != nil || obs.Info["reason"] != core.FinishCancelled {
				t.Fatalf("end: %+v, %v", obs, err)
			}
			if _, err := say(ctx, "late"); !errors.Is(err, core.ErrNotFound) {
				t.Errorf("step after End: %v, want NotFound", err)
			}
			for _, c := range env.recorded() {
				if !strings.HasSuffix(c, " "+w.name) {
					t.Errorf("%s, want every call over %s", c, w.name)
				}
			}
		})
	}
}

// A plugin that dies mid-call fails the call at once with ErrUnavailable,
// which the host's crash handling looks for, rather than hanging; the
// plugin's socket is gone then, so later calls are made over gRPC. (Closing
// the plugin side's socket is what its death does to the connection.)
func TestPluginGoneMidStep(t *testing.T) {
	env := newWireEnv()
	p := &Plugin{Impl: env, Logger: hclog.NewNullLogger()}
	client, _ := serveWire(t, p)
	defer close(env.release)
	ctx := context.Background()
	sess, _, err := client.NewEpisode(ctx, Episode{ID: "e", Task: core.Task{ID: "t"}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := sess.Step(ctx, core.Message{Role: core.RoleAssistant, Content: "hang"})
		done <- err
	}()
	<-env.started
	p.closeEpisodes(ctx)
	select {
	case err := <-done:
		if !errors.Is(err, core.ErrUnavailable) {
			t.Fatalf("step on a plugin gone: %v, want ErrUnavailable", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the step still waits on a plugin gone")
	}
	// Only the socket is gone here, and gRPC still serves: a later call
	// goes there (a dead plugin fails it there as well, which
	// TestEnvPluginKilledMidStep in host/cmd/rlhost checks).
	if _, err := sess.Step(ctx, core.Message{Role: core.RoleAssistant, Content: "x"}); err != nil {
		t.Fatalf("a later step over gRPC: %v", err)
	}
	if got := env.recorded(); got[len(got)-1] != "Step grpc" {
		t.Errorf("calls: %q, want the later step over gRPC", got)
	}
}

// A connection that broke while the plugin lives is made again at the next
// call.
func TestEpisodeConnectionRedialled(t *testing.T) {
	client, _ := serveWire(t, &Plugin{Impl: newWireEnv(), Logger: hclog.NewNullLogger()})
	ctx := context.Background()
	sess, _, err := client.NewEpisode(ctx, Episode{ID: "e", Task: core.Task{ID: "t"}})
	if err != nil {
		t.Fatal(err)
	}
	first, err := client.eps.get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first.Close()
	if _, err := sess.Step(ctx, core.Message{Role: core.RoleAssistant, Content: "x"}); err != nil {
		t.Fatalf("step after the connection broke: %v", err)
	}
	if again, _ := client.eps.get(ctx); again == first {
		t.Fatal("the broken connection was kept")
	}
}

// A live plugin whose socket is gone (a cleaner of the temporary
// directory removed it) is still reached, over gRPC.
func TestEpisodeSocketRemovedUnderLivePlugin(t *testing.T) {
	env := newWireEnv()
	client, _ := serveWire(t, &Plugin{Impl: env, Logger: hclog.NewNullLogger()})
	ctx := context.Background()
	sess, _, err := client.NewEpisode(ctx, Episode{ID: "e", Task: core.Task{ID: "t"}})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := client.eps.get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(client.eps.path); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	if _, err := sess.Step(ctx, core.Message{Role: core.RoleAssistant, Content: "x"}); err != nil {
		t.Fatalf("step with the socket gone: %v", err)
	}
	if got := env.recorded(); len(got) != 2 || got[0] != "NewEpisode frames" || got[1] != "Step grpc" {
		t.Errorf("calls: %q, want the episode started on frames and stepped over gRPC", got)
	}
}

// The episode socket is in a directory only this user can enter. Shutdown
// removes it, and so does the host once the plugin is gone without one (a
// killed plugin cannot); the host's connection ends with its client.
func TestEpisodeSocketLifetime(t *testing.T) {
	cases := []struct {
		name     string
		shutdown bool
	}{
		{"shut down", true},
		{"killed", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client, gc := serveWire(t, &Plugin{Impl: newWireEnv(), Logger: hclog.NewNullLogger()})
			conn, err := client.eps.get(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Dir(client.eps.path)
			fi, err := os.Stat(dir)
			if err != nil {
				t.Fatal(err)
			}
			if perm := fi.Mode().Perm(); perm != 0o700 {
				t.Fatalf("socket directory mode %v, want 0700", perm)
			}
			if tc.shutdown {
				if err := client.Shutdown(context.Background()); err != nil {
					t.Fatal(err)
				}
				if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("the socket's directory %s is still there after Shutdown: %v", dir, err)
				}
			}
			_ = gc.Close() // what the plugin's death does to the host's client
			deadline := time.Now().Add(10 * time.Second)
			for {
				_, err := os.Stat(dir)
				if conn.Broken() && errors.Is(err, fs.ErrNotExist) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after the client closed: connection broken %v, socket directory: %v", conn.Broken(), err)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// Frames the env does not expect fail alone or close only their own
// connection: the host's connection goes on.
func TestEpisodeSocketRefusesBadCalls(t *testing.T) {
	env := newWireEnv()
	client, _ := serveWire(t, &Plugin{Impl: env, Logger: hclog.NewNullLogger()})
	ctx := context.Background()
	sess, _, err := client.NewEpisode(ctx, Episode{ID: "e", Task: core.Task{ID: "t"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("a call of no kind", func(t *testing.T) {
		c, err := frames.Dial[rlhostpb.EnvCall, rlhostpb.EnvReply](ctx, client.eps.path, "test")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Call(ctx, &rlhostpb.EnvCall{}); !errors.Is(err, core.ErrUnimplemented) {
			t.Fatalf("empty call: %v, want Unimplemented", err)
		}
	})
	garbage := []struct {
		name string
		data []byte
	}{
		{"a length past the limit", []byte{0xff, 0xff, 0xff, 0xff}},
		{"a body that is not a message", []byte{0, 0, 0, 2, 0xff, 0xff}},
	}
	for _, tc := range garbage {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("unix", client.eps.path)
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
		})
	}
	if _, err := sess.Step(ctx, core.Message{Role: core.RoleAssistant, Content: "x"}); err != nil {
		t.Fatalf("the host's connection broke too: %v", err)
	}
}
