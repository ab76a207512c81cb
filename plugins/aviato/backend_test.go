package aviato

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/core/sdk/sandboxplugin/sandboxtest"
	"github.com/rlhost/rlhost/plugins/aviato/fakeaviato"
	"github.com/rlhost/rlhost/plugins/local"
)

func TestMain(m *testing.M) {
	// The fake's local sandboxes re-execute this binary as their init.
	if local.Reexec() {
		return
	}
	if sandboxtest.CrashChild(newForSuite) {
		return
	}
	os.Exit(m.Run())
}

func startFake(t *testing.T, opts fakeaviato.Options) *fakeaviato.Server {
	t.Helper()
	srv, err := fakeaviato.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv
}

// configure makes a backend against srv with env as its environment.
func configure(t *testing.T, srv *fakeaviato.Server, cfg map[string]any, spec core.SandboxSpec, env map[string]string) (*Backend, schema.Diagnostics) {
	t.Helper()
	if cfg == nil {
		cfg = map[string]any{}
	}
	if _, ok := cfg["api_url"]; !ok {
		cfg["api_url"] = srv.URL
	}
	if _, ok := cfg["state_dir"]; !ok {
		cfg["state_dir"] = t.TempDir()
	}
	if env == nil {
		env = map[string]string{apiKeyEnv: fakeaviato.DefaultAPIKey}
	}
	js, _ := json.Marshal(cfg)
	b := New()
	b.getenv = func(k string) string { return env[k] }
	d := b.Configure(context.Background(), schema.Config{Name: "t", JSON: js, RunID: "run-1"}, spec)
	if !d.HasErrors() {
		t.Cleanup(func() { b.Shutdown(context.Background()) })
	}
	return b, d
}

func TestSandboxLifecycle(t *testing.T) {
	srv := startFake(t, fakeaviato.Options{StartPolls: 3})
	spec := core.SandboxSpec{Labels: map[string]string{"team": "rl"}, Env: map[string]string{"GREETING": "hi"},
		Limits: core.Limits{CPUs: 0.5, MemoryBytes: 512 << 20}, TTL: 90 * time.Second}
	b, d := configure(t, srv, nil, spec, nil)
	if d.HasErrors() {
		t.Fatal(d.Err())
	}
	ctx := context.Background()
	info, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	got := srv.Sandboxes()
	if len(got) != 1 || got[0].CPU != "500m" || got[0].Memory != "512Mi" || got[0].MaxLifetime != 90 || got[0].Image != defaultImage {
		t.Fatalf("fake saw %+v", got)
	}
	for _, tag := range []string{"team=rl", managedTag, "rlhost.run=run-1"} {
		if !strings.Contains(strings.Join(got[0].Tags, " "), tag) {
			t.Errorf("tags %v lack %s", got[0].Tags, tag)
		}
	}

	tests := []struct {
		name      string
		req       core.ExecRequest
		exit      int
		out, err  string
		truncated bool
		timedOut  bool
	}{
		{"argv exact", core.ExecRequest{Command: []string{"printf", "%s|", "a b", "it's", "$HOME"}}, 0, "a b|it's|$HOME|", "", false, false},
		{"stderr apart and exit code", core.ExecRequest{Command: []string{"/bin/sh", "-c", "echo out; echo err >&2; exit 7"}}, 7, "out\n", "err\n", false, false},
		{"env from spec and request", core.ExecRequest{Command: []string{"/bin/sh", "-c", `echo "$GREETING $X"`}, Env: map[string]string{"X": "y z"}}, 0, "hi y z\n", "", false, false},
		{"stdin", core.ExecRequest{Command: []string{"cat"}, Stdin: []byte("from stdin\x00\xff")}, 0, "from stdin\x00\xff", "", false, false},
		{"large stdin", core.ExecRequest{Command: []string{"wc", "-c"}, Stdin: []byte(strings.Repeat("x", 200<<10))}, 0, "204800\n", "", false, false},
		{"workdir", core.ExecRequest{Command: []string{"pwd"}}, 0, "/workspace\n", "", false, false},
		{"capped output", core.ExecRequest{Command: []string{"/bin/sh", "-c", "head -c 100000 /dev/zero | tr '\\0' a"}, MaxOutputBytes: 10}, 0, "aaaaaaaaaa", "", true, false},
		{"timeout", core.ExecRequest{Command: []string{"sleep", "30"}, Timeout: time.Second}, -1, "", "", false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := b.Exec(ctx, info.ID, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != tc.exit || res.Stdout != tc.out || res.Stderr != tc.err || res.OutputTruncated != tc.truncated || res.TimedOut != tc.timedOut {
				t.Errorf("got %+v", res)
			}
		})
	}

	if err := b.WriteFile(ctx, info.ID, "sub/dir/f.sh", []byte("echo ran"), 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := b.ReadFile(ctx, info.ID, "/workspace/sub/dir/f.sh", 0)
	if err != nil || string(data) != "echo ran" {
		t.Fatalf("read back %q, %v", data, err)
	}
	if _, err := b.ReadFile(ctx, info.ID, "sub/dir/f.sh", 3); !errors.Is(err, core.ErrTooLarge) {
		t.Errorf("capped read: %v", err)
	}
	if _, err := b.ReadFile(ctx, info.ID, "missing", 0); err == nil {
		t.Error("reading a missing file succeeded")
	}
	files, err := b.ListFiles(ctx, info.ID, "sub/dir")
	if err != nil || len(files) != 1 || files[0].Path != "/workspace/sub/dir/f.sh" || files[0].Size != 8 || files[0].Mode != 0o755 {
		t.Fatalf("list: %+v, %v", files, err)
	}
	if res, _ := b.Exec(ctx, info.ID, core.ExecRequest{Command: []string{"./sub/dir/f.sh"}}); res.Stdout != "ran\n" {
		t.Errorf("mode not applied: %+v", res)
	}

	list, err := b.List(ctx, map[string]string{"team": "rl"})
	if err != nil || len(list) != 1 || list[0].ID != info.ID {
		t.Fatalf("list by label: %+v, %v", list, err)
	}
	if list, _ := b.List(ctx, map[string]string{"team": "other"}); len(list) != 0 {
		t.Errorf("list by another label: %+v", list)
	}
	if err := b.Destroy(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if err := b.Destroy(ctx, info.ID); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("second destroy: %v", err)
	}
	if _, err := b.Exec(ctx, info.ID, core.ExecRequest{Command: []string{"true"}}); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("exec in a deleted sandbox: %v", err)
	}
}

func TestConfigureRejects(t *testing.T) {
	srv := startFake(t, fakeaviato.Options{})
	tests := []struct {
		name string
		cfg  map[string]any
		spec core.SandboxSpec
		env  map[string]string
		path string
	}{
		{"rootfs", nil, core.SandboxSpec{Rootfs: "/srv/root"}, nil, "rootfs"},
		{"pids", nil, core.SandboxSpec{Limits: core.Limits{Pids: 10}}, nil, "limits.pids"},
		{"disk", nil, core.SandboxSpec{Limits: core.Limits{DiskBytes: 1 << 30}}, nil, "limits.disk"},
		{"cpu_time", nil, core.SandboxSpec{Limits: core.Limits{CPUTime: time.Second}}, nil, "limits.cpu_time"},
		{"no key", nil, core.SandboxSpec{}, map[string]string{}, "api_key"},
		{"bad key", nil, core.SandboxSpec{}, map[string]string{apiKeyEnv: "wrong"}, "api_key"},
		{"wandb without entity", nil, core.SandboxSpec{}, map[string]string{wandbKeyEnv: "k"}, "wandb_entity"},
		{"url with path", map[string]any{"api_url": "https://x.example/api"}, core.SandboxSpec{}, nil, "api_url"},
		{"unreachable", map[string]any{"api_url": "http://127.0.0.1:1"}, core.SandboxSpec{}, nil, "api_url"},
		{"bad duration", map[string]any{"start_timeout": "soon"}, core.SandboxSpec{}, nil, "start_timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, d := configure(t, srv, tc.cfg, tc.spec, tc.env)
			var paths []string
			for _, x := range d {
				paths = append(paths, strings.Join(x.Path, "."))
			}
			if !d.HasErrors() || !strings.Contains(strings.Join(paths, " "), tc.path) {
				t.Fatalf("diagnostics %+v, want an error at %s", d, tc.path)
			}
			if strings.Contains(d.Err().Error(), "wrong") {
				t.Errorf("the key is echoed: %v", d.Err())
			}
			if tc.name == "unreachable" && time.Since(start) > 20*time.Second {
				t.Errorf("unreachable endpoint took %s to fail", time.Since(start))
			}
		})
	}
}

func TestQuotaIsLimitReached(t *testing.T) {
	srv := startFake(t, fakeaviato.Options{MaxSandboxes: 1})
	b, d := configure(t, srv, map[string]any{"max_retries": 1}, core.SandboxSpec{}, nil)
	if d.HasErrors() {
		t.Fatal(d.Err())
	}
	if _, err := b.Create(context.Background(), core.SandboxSpec{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Create(context.Background(), core.SandboxSpec{}); !errors.Is(err, core.ErrLimitReached) {
		t.Fatalf("over quota: %v", err)
	}
}

// A backend whose process died leaves an owner record; the next backend on
// the host deletes that owner's sandboxes and the record.
func TestReapOrphansOfDeadOwner(t *testing.T) {
	srv := startFake(t, fakeaviato.Options{})
	stateDir := t.TempDir()
	dead, d := configure(t, srv, map[string]any{"state_dir": stateDir}, core.SandboxSpec{}, nil)
	if d.HasErrors() {
		t.Fatal(d.Err())
	}
	// Pretend the first backend belongs to a process that has exited.
	gone := dead.owner
	gone.PID, gone.Start = 1<<22-1, ""
	_ = os.Remove(recordPath(stateDir, dead.owner))
	dead.owner = gone
	if err := writeRecord(stateDir, record{Owner: gone, BaseURL: srv.URL}); err != nil {
		t.Fatal(err)
	}
	orphan, err := dead.Create(context.Background(), core.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	dead.mu.Lock()
	dead.live = map[string]core.SandboxInfo{} // its Shutdown never runs
	dead.mu.Unlock()

	next, d := configure(t, srv, map[string]any{"state_dir": stateDir}, core.SandboxSpec{}, nil)
	if d.HasErrors() {
		t.Fatal(d.Err())
	}
	keep, err := next.Create(context.Background(), core.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	// Configure swept already; a second sweep finds nothing.
	if reaped, err := next.ReapOrphans(context.Background()); err != nil || len(reaped) != 0 {
		t.Fatalf("second sweep reaped %+v, %v", reaped, err)
	}
	left := srv.Sandboxes()
	if len(left) != 1 || left[0].ID != keep.ID || left[0].ID == orphan.ID {
		t.Fatalf("left %+v, want only %s", left, keep.ID)
	}
	if _, err := os.Stat(recordPath(stateDir, gone)); !os.IsNotExist(err) {
		t.Errorf("dead owner's record kept: %v", err)
	}
}
