package sandboxplugin_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/sdk/pluginbase"
	"github.com/rlhost/rlhost/core/sdk/sandboxplugin"
	"github.com/rlhost/rlhost/core/sdk/wire/lend"
	"github.com/rlhost/rlhost/core/sdk/wire/rlhostpb"
)

// memBackend keeps sandboxes as names. Exec answers the sandbox's id and
// the timeout it was given; the command "block" waits for its context to
// end and reports that on ended; "slow" reports a timed-out command.
type memBackend struct {
	sandboxplugin.Backend // nil: the calls a test does not make panic

	mu        sync.Mutex
	next      int
	live      map[string]bool
	events    []string // "ended ID" when a blocked exec returns, "destroyed ID"
	started   chan struct{}
	ended     chan error
	destroyed chan string
}

func newMemBackend() *memBackend {
	return &memBackend{live: map[string]bool{}, started: make(chan struct{}, 1), ended: make(chan error, 1), destroyed: make(chan string, 8)}
}

func (*memBackend) Info() pluginbase.Info {
	return pluginbase.Info{Name: "mem", Version: "1", Kind: pluginbase.KindSandbox}
}

func (b *memBackend) Create(context.Context, core.SandboxSpec) (core.SandboxInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next++
	id := fmt.Sprintf("sb-%d", b.next)
	b.live[id] = true
	return core.SandboxInfo{ID: id, Backend: "mem"}, nil
}

func (b *memBackend) check(id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.live[id] {
		return fmt.Errorf("sandbox %s: %w", id, core.ErrNotFound)
	}
	return nil
}

func (b *memBackend) Exec(ctx context.Context, id string, req core.ExecRequest) (core.ExecResult, error) {
	if err := b.check(id); err != nil {
		return core.ExecResult{}, err
	}
	switch req.Command[0] {
	case "block":
		b.started <- struct{}{}
		<-ctx.Done()
		time.Sleep(50 * time.Millisecond) // a slow wind-down, so a Destroy that does not wait overtakes it
		b.event("ended " + id)
		b.ended <- ctx.Err()
		return core.ExecResult{}, ctx.Err()
	case "slow":
		return core.ExecResult{ExitCode: -1, TimedOut: true, Duration: time.Millisecond}, nil
	}
	return core.ExecResult{Stdout: id + " " + req.Timeout.String(), Duration: time.Millisecond}, nil
}

func (b *memBackend) ReadFile(_ context.Context, id, path string, _ int64) ([]byte, error) {
	return []byte(id + ":" + path), b.check(id)
}

func (b *memBackend) WriteFile(_ context.Context, id, _ string, _ []byte, _ uint32) error {
	return b.check(id)
}

func (b *memBackend) ListFiles(_ context.Context, id, path string) ([]core.FileInfo, error) {
	return []core.FileInfo{{Path: path}}, b.check(id)
}

func (b *memBackend) Destroy(_ context.Context, id string) error {
	if err := b.check(id); err != nil {
		return err
	}
	b.mu.Lock()
	delete(b.live, id)
	b.mu.Unlock()
	b.event("destroyed " + id)
	b.destroyed <- id
	return nil
}

func (b *memBackend) event(e string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.events = append(b.events, e)
}

func (b *memBackend) Shutdown(context.Context) error {
	b.event("shutdown")
	return nil
}

// serveMem serves a memBackend over real gRPC as a plugin and returns the
// host's client of it.
func serveMem(t *testing.T) (*sandboxplugin.Client, *memBackend) {
	t.Helper()
	b := newMemBackend()
	gc, _ := plugin.TestPluginGRPCConn(t, false, map[string]plugin.Plugin{
		pluginbase.KindSandbox: &sandboxplugin.Plugin{Impl: b, Logger: hclog.NewNullLogger()},
	})
	t.Cleanup(func() { _ = gc.Close() })
	raw, err := gc.Dispense(pluginbase.KindSandbox)
	if err != nil {
		t.Fatal(err)
	}
	c := raw.(*sandboxplugin.Client)
	t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
	return c, b
}

// lentCalls are every call of the lent-sandbox wire on sandbox id.
func lentCalls(id string) map[string]*rlhostpb.LentCall {
	return map[string]*rlhostpb.LentCall{
		"Info":      {Call: &rlhostpb.LentCall_Info{Info: &rlhostpb.SandboxID{Id: id}}},
		"Exec":      {Call: &rlhostpb.LentCall_Exec{Exec: &rlhostpb.ExecRequest{SandboxId: id, Command: [][]byte{[]byte("true")}}}},
		"ReadFile":  {Call: &rlhostpb.LentCall_ReadFile{ReadFile: &rlhostpb.ReadFileRequest{SandboxId: id, Path: []byte("f")}}},
		"WriteFile": {Call: &rlhostpb.LentCall_WriteFile{WriteFile: &rlhostpb.WriteFileRequest{SandboxId: id, Path: []byte("f")}}},
		"ListFiles": {Call: &rlhostpb.LentCall_ListFiles{ListFiles: &rlhostpb.ListFilesRequest{SandboxId: id, Path: []byte(".")}}},
	}
}

func dialLease(t *testing.T, ls lend.Lease) *lend.Conn {
	t.Helper()
	if ls.Socket == "" || len(ls.Token()) < 16 {
		t.Fatalf("no usable lease: %+v", ls)
	}
	c, err := lend.Dial(context.Background(), ls.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A backend's socket serves a sandbox only to calls carrying its lease's
// token, and only until the sandbox is destroyed; every refusal looks the
// same, so a caller learns nothing of other sandboxes.
func TestBackendLendsOnlyToItsToken(t *testing.T) {
	ctx := context.Background()
	c, _ := serveMem(t)
	a, la, err := c.CreateLent(ctx, core.SandboxSpec{}, 7*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b, lb, err := c.CreateLent(ctx, core.SandboxSpec{}, 7*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if la.Socket != lb.Socket || string(la.Token()) == string(lb.Token()) {
		t.Fatalf("want one socket and two tokens: %+v %+v", la, lb)
	}
	plain, err := c.Create(ctx, core.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	conn := dialLease(t, la)
	wrong := append([]byte(nil), la.Token()...)
	wrong[0] ^= 1
	cases := []struct {
		name  string
		id    string
		token []byte
		ok    bool
	}{
		{"its own token", a.ID, la.Token(), true},
		{"no token", a.ID, nil, false},
		{"one bit off", a.ID, wrong, false},
		{"a prefix of it", a.ID, la.Token()[:8], false},
		{"another sandbox's token", a.ID, lb.Token(), false},
		{"its token on another sandbox", b.ID, la.Token(), false},
		{"a sandbox created without a lease", plain.ID, la.Token(), false},
		{"no such sandbox", "sb-99", la.Token(), false},
	}
	for _, tc := range cases {
		for name, call := range lentCalls(tc.id) {
			call.Token = tc.token
			rep, err := conn.Call(ctx, call)
			if tc.ok && err != nil {
				t.Errorf("%s, %s: %v", tc.name, name, err)
			}
			if !tc.ok && (err == nil || !errors.Is(err, core.ErrNotFound)) {
				t.Errorf("%s, %s: want NOT_FOUND, got %v, %v", tc.name, name, rep, err)
			}
		}
	}
	if _, err := c.DestroyLent(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	for name, call := range lentCalls(a.ID) {
		call.Token = la.Token()
		if _, err := conn.Call(ctx, call); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("%s after destroy: want NOT_FOUND, got %v", name, err)
		}
	}
	// The other lease is untouched.
	call := lentCalls(b.ID)["Exec"]
	call.Token = lb.Token()
	if _, err := conn.Call(ctx, call); err != nil {
		t.Errorf("the other sandbox after the first's destroy: %v", err)
	}
}

// The backend applies the block's timeout to a lent exec that names none,
// and counts its lent execs for the host, which gets them at destroy.
func TestBackendCountsLentExecs(t *testing.T) {
	ctx := context.Background()
	c, _ := serveMem(t)
	info, ls, err := c.CreateLent(ctx, core.SandboxSpec{}, 7*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	conn := dialLease(t, ls)
	exec := func(cmd string, timeout time.Duration) *rlhostpb.ExecResult {
		rep, err := conn.Call(ctx, &rlhostpb.LentCall{Token: ls.Token(), Call: &rlhostpb.LentCall_Exec{Exec: &rlhostpb.ExecRequest{
			SandboxId: info.ID, Command: [][]byte{[]byte(cmd)}, TimeoutMs: timeout.Milliseconds(),
		}}})
		if err != nil {
			t.Fatal(err)
		}
		return rep.GetExec()
	}
	if got, want := string(exec("true", 0).GetStdout()), info.ID+" 7s"; got != want {
		t.Errorf("exec naming no timeout ran with %q, want %q", got, want)
	}
	if got, want := string(exec("true", 2*time.Second).GetStdout()), info.ID+" 2s"; got != want {
		t.Errorf("exec naming its timeout ran with %q, want %q", got, want)
	}
	exec("slow", 0)
	use, err := c.DestroyLent(ctx, info.ID)
	if err != nil {
		t.Fatal(err)
	}
	if use.Execs != 3 || use.Timeouts != 1 || use.ExecTime <= 0 {
		t.Errorf("use = %+v, want 3 execs, 1 timeout and some time", use)
	}
	// Without a lease there is nothing to count.
	plain, err := c.Create(ctx, core.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if use, err := c.DestroyLent(ctx, plain.ID); err != nil || use != (lend.Usage{}) {
		t.Errorf("destroy of an unlent sandbox: %+v, %v", use, err)
	}
}

// Destroy ends the sandbox's lease, and Shutdown every lease, before the
// backend's own Destroy or Shutdown runs: a lent call still running sees
// its context end, and has returned before then.
func TestEndingALeaseCutsOffRunningCalls(t *testing.T) {
	cases := []struct {
		name string
		end  func(ctx context.Context, c *sandboxplugin.Client, id string) error
		last func(id string) string // the backend's event after the call's end
	}{
		{"destroy", func(ctx context.Context, c *sandboxplugin.Client, id string) error {
			_, err := c.DestroyLent(ctx, id)
			return err
		}, func(id string) string { return "destroyed " + id }},
		{"shutdown", func(ctx context.Context, c *sandboxplugin.Client, _ string) error {
			return c.Shutdown(ctx)
		}, func(string) string { return "shutdown" }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			c, b := serveMem(t)
			info, ls, err := c.CreateLent(ctx, core.SandboxSpec{}, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			conn := dialLease(t, ls)
			done := make(chan error, 1)
			go func() {
				_, err := conn.Call(ctx, &rlhostpb.LentCall{Token: ls.Token(), Call: &rlhostpb.LentCall_Exec{Exec: &rlhostpb.ExecRequest{
					SandboxId: info.ID, Command: [][]byte{[]byte("block")},
				}}})
				done <- err
			}()
			<-b.started
			if err := tc.end(ctx, c, info.ID); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-b.ended:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("the running call ended with %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the lent call was left running")
			}
			if err := <-done; err == nil {
				t.Error("the cut-off call succeeded")
			}
			b.mu.Lock()
			defer b.mu.Unlock()
			if want := []string{"ended " + info.ID, tc.last(info.ID)}; !slices.Equal(b.events, want) {
				t.Errorf("events %q, want %q", b.events, want)
			}
		})
	}
}

// A backend that cannot open its socket lends nothing, and says so with
// the zero Lease: its sandboxes are still made, and the host relays.
func TestBackendThatCannotListenLendsNothing(t *testing.T) {
	ctx := context.Background()
	c, _ := serveMem(t)
	t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "missing")) // the plugin runs in this process
	info, ls, err := c.CreateLent(ctx, core.SandboxSpec{}, time.Minute)
	if err != nil || info.ID == "" {
		t.Fatalf("create: %+v, %v", info, err)
	}
	if ls.Socket != "" || ls.Token() != nil {
		t.Errorf("got %v, want no lease", ls)
	}
	if res, err := c.Exec(ctx, info.ID, core.ExecRequest{Command: []string{"true"}}); err != nil || res.Stdout == "" {
		t.Errorf("exec over gRPC: %+v, %v", res, err)
	}
	if use, err := c.DestroyLent(ctx, info.ID); err != nil || use != (lend.Usage{}) {
		t.Errorf("destroy: %+v, %v", use, err)
	}
}

// The socket lives in a directory only this user can enter, from the first
// lease to Shutdown, which removes it and lends nothing after.
func TestShutdownRemovesTheLentSocket(t *testing.T) {
	ctx := context.Background()
	c, b := serveMem(t)
	if _, err := c.Create(ctx, core.SandboxSpec{}); err != nil {
		t.Fatal(err)
	}
	_, ls, err := c.CreateLent(ctx, core.SandboxSpec{}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(ls.Socket)
	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o700 {
		t.Errorf("socket directory mode %v, want 0700", st.Mode().Perm())
	}
	if err := c.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket directory after shutdown: %v", err)
	}
	if _, _, err := c.CreateLent(ctx, core.SandboxSpec{}, time.Minute); err == nil {
		t.Error("a lease after shutdown")
	}
	// The sandbox made for it is not left behind.
	select {
	case id := <-b.destroyed:
		if id != "sb-3" {
			t.Errorf("destroyed %s, want sb-3", id)
		}
	case <-time.After(10 * time.Second):
		t.Error("the sandbox of the refused lease was left")
	}
}

// servePluginEnv makes the test binary, run again with it set, a backend
// plugin process serving a memBackend (see TestMain).
const servePluginEnv = "SANDBOXPLUGIN_TEST_SERVE_MEM"

func TestMain(m *testing.M) {
	if os.Getenv(servePluginEnv) == "1" {
		sandboxplugin.Serve(newMemBackend())
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A backend plugin process that is killed cannot remove its lent-sandbox
// socket; the host does, once it has seen the process go.
func TestKilledBackendsSocketIsRemoved(t *testing.T) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), servePluginEnv+"=1")
	pc := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  pluginbase.HandshakeConfig(),
		Plugins:          map[string]plugin.Plugin{pluginbase.KindSandbox: &sandboxplugin.Plugin{}},
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           hclog.NewNullLogger(),
	})
	t.Cleanup(pc.Kill)
	rpc, err := pc.Client()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := rpc.Dispense(pluginbase.KindSandbox)
	if err != nil {
		t.Fatal(err)
	}
	c := raw.(*sandboxplugin.Client)
	_, ls, err := c.CreateLent(context.Background(), core.SandboxSpec{}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	dialLease(t, ls) // the socket is served
	if err := syscall.Kill(pc.ReattachConfig().Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for !pc.Exited() {
		time.Sleep(10 * time.Millisecond)
	}
	pc.Kill() // as pluginmgr does on seeing the process gone
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := os.Stat(filepath.Dir(ls.Socket))
		if errors.Is(err, os.ErrNotExist) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the killed plugin's socket directory is still there: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
