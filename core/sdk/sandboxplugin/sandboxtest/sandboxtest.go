// Package sandboxtest is the conformance suite every sandbox backend must
// pass: it drives a backend the way the host does, over real gRPC between
// the plugin's server and the host's client (sandboxplugin.Plugin, with the
// message limits of a plugin process), and checks the behaviour
// environments and the host rely on (exec, files, labels, limits,
// Shutdown, the orphan sweep after a crash). It is the sibling of
// core/sdk/envplugin/envtest.
//
// A backend's own test file describes the backend in a Harness and calls
// Run, and calls CrashChild first thing in its TestMain. Where backends
// legitimately differ the Harness says so (which limits they enforce);
// nothing in the suite can be skipped. It does not test what one backend
// alone promises (isolation, pools, API retries): those stay in the
// backend's own tests.
package sandboxtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/core/sdk/pluginbase"
	"github.com/rlhost/rlhost/core/sdk/sandboxplugin"
)

// Harness describes one backend (in one configuration) to the suite.
type Harness struct {
	// New returns a fresh, unconfigured backend: what the plugin's main
	// passes to sandboxplugin.Serve.
	New func() sandboxplugin.Backend
	// Settings returns the backend-specific settings of a sandbox block, as
	// a config would write them (the suite fills in the schema's defaults,
	// as the host does). The suite calls it once per test and configures
	// every backend of that test with the result, so two backends of one
	// test share their state (state_dir, the service they talk to); it
	// must be usable from a child process too (see CrashChild).
	Settings func(t testing.TB) map[string]any
	// Limits lists the limits (HCL names, as in core.Limits.Named) the
	// backend enforces. Configure must accept each of them and reject
	// every other one with a diagnostic on ["limits", NAME].
	Limits []string
}

// Run runs the whole suite against h.
func Run(t *testing.T, h Harness) {
	t.Run("Limits", func(t *testing.T) { testLimits(t, h) })
	t.Run("LimitsHonoured", func(t *testing.T) { testLimitsHonoured(t, h) })
	t.Run("Sandbox", func(t *testing.T) { testSandbox(t, h) })
	t.Run("LabelsListDestroy", func(t *testing.T) { testLabels(t, h) })
	t.Run("ShutdownLeavesNothing", func(t *testing.T) { testShutdown(t, h) })
	t.Run("OrphanSweepAfterCrash", func(t *testing.T) { testCrash(t, h) })
}

// Serve runs b behind a real gRPC connection, set up as a plugin process
// and the host set it up (the plugin side's server is pluginbase's, with
// its message limits; the host side dials with go-plugin's call options),
// and returns the host-side client. Everything is closed when the test
// ends.
func Serve(t testing.TB, b sandboxplugin.Backend) sandboxplugin.Backend {
	t.Helper()
	dir, err := os.MkdirTemp("", "sandboxtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ln, err := net.Listen("unix", filepath.Join(dir, "plugin.sock"))
	if err != nil {
		t.Fatal(err)
	}
	p := &sandboxplugin.Plugin{Impl: b, Logger: hclog.NewNullLogger()}
	srv := pluginbase.NewGRPCServer(nil)
	if err := p.GRPCServer(nil, srv); err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	// The host's own dial settings, so the suite sees the transport it will.
	conn, err := grpc.NewClient("unix://"+ln.Addr().String(), append(pluginbase.DialOptions(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32), grpc.MaxCallSendMsgSize(math.MaxInt32)))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client, err := p.GRPCClient(context.Background(), nil, conn)
	if err != nil {
		t.Fatal(err)
	}
	return client.(sandboxplugin.Backend)
}

// runID is the run every suite backend belongs to.
const runID = "sandboxtest"

// configure completes settings with the schema's defaults and configures b
// with them and spec, as the host does for a sandbox block.
func configure(ctx context.Context, b sandboxplugin.Backend, settings map[string]any, spec core.SandboxSpec, baseDir string) (schema.Diagnostics, error) {
	raw, err := json.Marshal(settings)
	if err != nil {
		return nil, err
	}
	js, err := b.Info().Config.Complete(raw)
	if err != nil {
		return nil, fmt.Errorf("settings do not fit the backend's schema: %w", err)
	}
	return b.Configure(ctx, schema.Config{Name: "sandboxtest", JSON: js, BaseDir: baseDir, RunID: runID}, spec), nil
}

// start serves a new backend over gRPC, configures it and shuts it down
// when the test ends.
func start(t *testing.T, h Harness, settings map[string]any, spec core.SandboxSpec) sandboxplugin.Backend {
	t.Helper()
	b := Serve(t, h.New())
	diags, err := configure(context.Background(), b, settings, spec, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if diags.HasErrors() {
		t.Fatalf("Configure: %v", diags.Err())
	}
	t.Cleanup(func() {
		if err := b.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return b
}

// label makes a label value no other test shares.
func label(t testing.TB) string {
	return fmt.Sprintf("%s-%d", strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()), time.Now().UnixNano())
}

func create(t *testing.T, b sandboxplugin.Backend, spec core.SandboxSpec) core.SandboxInfo {
	t.Helper()
	info, err := b.Create(context.Background(), spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if info.ID == "" {
		t.Fatalf("Create returned no id: %+v", info)
	}
	return info
}

func sh(script string) []string { return []string{"sh", "-c", script} }

// limitValues sets each limit by its HCL name to a value every backend
// that enforces it can meet.
var limitValues = map[string]func(*core.Limits){
	"memory":     func(l *core.Limits) { l.MemoryBytes = 512 << 20 },
	"cpu_time":   func(l *core.Limits) { l.CPUTime = 30 * time.Second },
	"pids":       func(l *core.Limits) { l.Pids = 128 },
	"file_size":  func(l *core.Limits) { l.FileSizeBytes = 32 << 20 },
	"open_files": func(l *core.Limits) { l.OpenFiles = 256 },
	"tmp":        func(l *core.Limits) { l.TmpBytes = 64 << 20 },
	"output":     func(l *core.Limits) { l.OutputBytes = 1 << 20 },
	"disk":       func(l *core.Limits) { l.DiskBytes = 4 << 30 },
	"cpus":       func(l *core.Limits) { l.CPUs = 1 },
}

func testLimits(t *testing.T, h Harness) {
	for _, n := range (core.Limits{}).Named() {
		if limitValues[n.Name] == nil {
			t.Fatalf("limit %q is new: give it a value in sandboxtest's limitValues", n.Name)
		}
	}
	for _, name := range h.Limits {
		if limitValues[name] == nil {
			t.Fatalf("Harness.Limits names %q, which is no limit", name)
		}
	}
	settings := h.Settings(t)
	for _, n := range (core.Limits{}).Named() {
		t.Run(n.Name, func(t *testing.T) {
			var spec core.SandboxSpec
			limitValues[n.Name](&spec.Limits)
			b := Serve(t, h.New())
			diags, err := configure(context.Background(), b, settings, spec, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer b.Shutdown(context.Background())
			enforced := slices.Contains(h.Limits, n.Name)
			switch {
			case enforced && diags.HasErrors():
				t.Errorf("limits.%s is enforced, but Configure rejected it: %v", n.Name, diags.Err())
			case !enforced && !onPath(diags, "limits", n.Name):
				t.Errorf("limits.%s is not enforced, but Configure did not reject it on [limits %s]: %v", n.Name, n.Name, diags)
			}
		})
	}
}

// limitProbes check, for the limits a test can trip quickly and on every
// backend that enforces them, that a sandbox created with the limit keeps
// to it. (Memory, pids and the rest cost too much to trip in a suite every
// backend runs; backends test those themselves.)
var limitProbes = []struct {
	name  string
	set   func(*core.Limits)
	check func(t *testing.T, b sandboxplugin.Backend, id string)
}{
	{"output", func(l *core.Limits) { l.OutputBytes = 2000 }, func(t *testing.T, b sandboxplugin.Backend, id string) {
		res, err := b.Exec(context.Background(), id, core.ExecRequest{Command: sh("head -c 5000 /dev/zero"), Timeout: 30 * time.Second})
		if err != nil || len(res.Stdout) != 2000 || !res.OutputTruncated {
			t.Errorf("5000 bytes under limits.output = 2000: %d bytes, truncated %v, %v", len(res.Stdout), res.OutputTruncated, err)
		}
	}},
	{"file_size", func(l *core.Limits) { l.FileSizeBytes = 64 << 10 }, func(t *testing.T, b sandboxplugin.Backend, id string) {
		ctx := context.Background()
		if err := b.WriteFile(ctx, id, "too-big", make([]byte, 100<<10), 0o644); !errors.Is(err, core.ErrTooLarge) {
			t.Errorf("WriteFile of 100 KiB under limits.file_size = 64 KiB: %v, want ErrTooLarge", err)
		}
		res, err := b.Exec(ctx, id, core.ExecRequest{Command: sh("head -c 100000 /dev/zero > too-big-exec"), Timeout: 30 * time.Second})
		if err != nil || res.ExitCode == 0 {
			t.Errorf("a command writing 100000 bytes under limits.file_size = 64 KiB: exit %d, %v", res.ExitCode, err)
		}
	}},
	{"cpu_time", func(l *core.Limits) { l.CPUTime = time.Second }, func(t *testing.T, b sandboxplugin.Backend, id string) {
		res, err := b.Exec(context.Background(), id, core.ExecRequest{Command: sh("while :; do :; done"), Timeout: 60 * time.Second})
		if err != nil || !res.CPUTimeExceeded || res.TimedOut {
			t.Errorf("a busy loop under limits.cpu_time = 1s: cpu_time_exceeded %v, timed out %v, exit %d, %v", res.CPUTimeExceeded, res.TimedOut, res.ExitCode, err)
		}
	}},
}

// testLimitsHonoured creates one sandbox with every probed limit the
// backend enforces and trips each.
func testLimitsHonoured(t *testing.T, h Harness) {
	var spec core.SandboxSpec
	var probes []int
	for i, p := range limitProbes {
		if slices.Contains(h.Limits, p.name) {
			p.set(&spec.Limits)
			probes = append(probes, i)
		}
	}
	if len(probes) == 0 {
		t.Logf("the backend enforces none of the probed limits (%d probes)", len(limitProbes))
		return
	}
	b := start(t, h, h.Settings(t), core.SandboxSpec{})
	id := create(t, b, spec).ID
	t.Cleanup(func() { b.Destroy(context.Background(), id) })
	for _, i := range probes {
		t.Run(limitProbes[i].name, func(t *testing.T) { limitProbes[i].check(t, b, id) })
	}
}

// onPath says whether diags hold an error on exactly path.
func onPath(diags schema.Diagnostics, path ...string) bool {
	for _, d := range diags {
		if d.Severity == schema.Error && slices.Equal(d.Path, path) {
			return true
		}
	}
	return false
}

// testSandbox checks one sandbox's exec and file calls.
func testSandbox(t *testing.T, h Harness) {
	b := start(t, h, h.Settings(t), core.SandboxSpec{})
	ctx := context.Background()
	info := create(t, b, core.SandboxSpec{Env: map[string]string{"SPEC_VAR": "from-spec"}, Labels: map[string]string{"suite": label(t)}})
	id := info.ID
	t.Cleanup(func() { b.Destroy(context.Background(), id) })
	run := func(t *testing.T, req core.ExecRequest) core.ExecResult {
		t.Helper()
		if req.Timeout == 0 {
			req.Timeout = 30 * time.Second
		}
		res, err := b.Exec(ctx, id, req)
		if err != nil {
			t.Fatalf("Exec %q: %v", req.Command, err)
		}
		return res
	}

	t.Run("ExecExitAndStreams", func(t *testing.T) {
		tests := []struct {
			script         string
			code           int
			stdout, stderr string
		}{
			{"true", 0, "", ""},
			{"echo out; echo err >&2", 0, "out\n", "err\n"},
			{"printf 'a\\000b\\377'; exit 3", 3, "a\x00b\xff", ""},
			{"echo bad >&2; exit 42", 42, "", "bad\n"},
		}
		for _, tt := range tests {
			res := run(t, core.ExecRequest{Command: sh(tt.script)})
			if res.ExitCode != tt.code || res.Stdout != tt.stdout || res.Stderr != tt.stderr || res.TimedOut {
				t.Errorf("%q: exit %d, stdout %q, stderr %q, timed out %v; want exit %d, stdout %q, stderr %q",
					tt.script, res.ExitCode, res.Stdout, res.Stderr, res.TimedOut, tt.code, tt.stdout, tt.stderr)
			}
		}
		// argv is passed as is: no word splitting, no shell expansion.
		res := run(t, core.ExecRequest{Command: []string{"printf", "%s|", "two words", "$HOME", "*"}})
		if res.Stdout != "two words|$HOME|*|" {
			t.Errorf("argv not passed verbatim: %q", res.Stdout)
		}
		if res, err := b.Exec(ctx, id, core.ExecRequest{Command: []string{"rlhost-no-such-program"}, Timeout: 30 * time.Second}); err == nil && res.ExitCode == 0 {
			t.Errorf("a missing program exited 0")
		}
	})

	t.Run("ExecStdinAndEnv", func(t *testing.T) {
		in := append([]byte("line one\n"), bytes.Repeat([]byte{0, 1, 2, 255}, 4096)...)
		if res := run(t, core.ExecRequest{Command: []string{"cat"}, Stdin: in}); res.Stdout != string(in) {
			t.Errorf("cat of %d stdin bytes returned %d bytes", len(in), len(res.Stdout))
		}
		res := run(t, core.ExecRequest{Command: sh(`printf '%s,%s' "$SPEC_VAR" "$REQ_VAR"`), Env: map[string]string{"REQ_VAR": "from request"}})
		if res.Stdout != "from-spec,from request" {
			t.Errorf("spec and request env: %q", res.Stdout)
		}
		res = run(t, core.ExecRequest{Command: sh(`printf %s "$SPEC_VAR"`), Env: map[string]string{"SPEC_VAR": "overridden"}})
		if res.Stdout != "overridden" {
			t.Errorf("request env does not override the spec's: %q", res.Stdout)
		}
	})

	t.Run("ExecWorkdir", func(t *testing.T) {
		if err := b.WriteFile(ctx, id, "wd/sub/marker", []byte("here"), 0o644); err != nil {
			t.Fatal(err)
		}
		if res := run(t, core.ExecRequest{Command: sh("cat wd/sub/marker")}); res.Stdout != "here" {
			t.Errorf("the default working directory is not the workspace: %q %q", res.Stdout, res.Stderr)
		}
		if res := run(t, core.ExecRequest{Command: sh("cat marker"), Dir: "wd/sub"}); res.Stdout != "here" {
			t.Errorf("a relative Dir is not taken from the workspace: %q %q", res.Stdout, res.Stderr)
		}
		run(t, core.ExecRequest{Command: sh("echo made > made-by-exec")})
		if got, err := b.ReadFile(ctx, id, "made-by-exec", 0); err != nil || string(got) != "made\n" {
			t.Errorf("a file exec wrote in the workspace reads %q, %v", got, err)
		}
	})

	t.Run("ExecTimeoutKillsTree", func(t *testing.T) {
		res := run(t, core.ExecRequest{Command: sh("sleep 60 & echo $! > bg.pid; wait"), Timeout: time.Second})
		if !res.TimedOut || res.ExitCode == 0 {
			t.Fatalf("a 60 s command under a 1 s timeout: timed out %v, exit %d", res.TimedOut, res.ExitCode)
		}
		// The background child must be gone too. Polled: a kill takes a
		// moment to land; the bound only stops a hung test.
		alive := `p=$(cat bg.pid) || exit 2; s=$(cat /proc/$p/stat 2>/dev/null) || exit 1; case "$s" in *") Z "*) exit 1;; esac; exit 0`
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			r := run(t, core.ExecRequest{Command: sh(alive)})
			if r.ExitCode == 1 {
				break
			}
			if r.ExitCode != 0 || time.Now().After(deadline) {
				t.Fatalf("the timed-out command's background child still runs (exit %d, %q)", r.ExitCode, r.Stderr)
			}
		}
		if r := run(t, core.ExecRequest{Command: []string{"true"}}); r.ExitCode != 0 {
			t.Errorf("the sandbox does not run commands after a timeout: %+v", r)
		}
	})

	t.Run("ExecOutputCap", func(t *testing.T) {
		const limit = 1000
		res := run(t, core.ExecRequest{Command: sh("head -c 100000 /dev/zero; head -c 50 /dev/zero >&2"), MaxOutputBytes: limit})
		if res.ExitCode != 0 || len(res.Stdout) != limit || !res.OutputTruncated || len(res.Stderr) != 50 {
			t.Errorf("100000 bytes under a %d byte cap: exit %d, %d stdout bytes, %d stderr bytes, truncated %v",
				limit, res.ExitCode, len(res.Stdout), len(res.Stderr), res.OutputTruncated)
		}
		if res := run(t, core.ExecRequest{Command: sh("head -c 999 /dev/zero"), MaxOutputBytes: limit}); len(res.Stdout) != 999 || res.OutputTruncated {
			t.Errorf("999 bytes under a %d byte cap: %d bytes, truncated %v", limit, len(res.Stdout), res.OutputTruncated)
		}
	})

	t.Run("Files", func(t *testing.T) {
		bin := make([]byte, 256)
		for i := range bin {
			bin[i] = byte(i)
		}
		large := bytes.Repeat([]byte("0123456789abcdef"), 5<<16) // 5 MiB: more than one gRPC message holds by default
		tests := []struct {
			path string
			data []byte
		}{
			{"files/binary.bin", bin},
			{"files/empty", nil},
			{"files/large.txt", large},
			{"files/deep/er/nested.txt", []byte("nested")},
		}
		for _, tt := range tests {
			if err := b.WriteFile(ctx, id, tt.path, tt.data, 0o644); err != nil {
				t.Fatalf("WriteFile %s: %v", tt.path, err)
			}
			got, err := b.ReadFile(ctx, id, tt.path, 0)
			if err != nil || !bytes.Equal(got, tt.data) {
				t.Errorf("ReadFile %s: %d bytes, %v; wrote %d", tt.path, len(got), err, len(tt.data))
			}
		}
		if err := b.WriteFile(ctx, id, "files/binary.bin", []byte("shorter"), 0o644); err != nil {
			t.Fatal(err)
		}
		if got, _ := b.ReadFile(ctx, id, "files/binary.bin", 0); string(got) != "shorter" {
			t.Errorf("an overwritten file reads %q", got)
		}
		if res := run(t, core.ExecRequest{Command: sh("wc -c < files/large.txt")}); strings.TrimSpace(res.Stdout) != fmt.Sprint(len(large)) {
			t.Errorf("exec sees %q bytes of a %d byte file written through WriteFile", res.Stdout, len(large))
		}
		if got, err := b.ReadFile(ctx, id, "files/large.txt", 100); (err == nil && len(got) > 100) || (err != nil && !errors.Is(err, core.ErrTooLarge)) {
			t.Errorf("ReadFile capped at 100 bytes: %d bytes, %v", len(got), err)
		}
		list, err := b.ListFiles(ctx, id, "files")
		if err != nil {
			t.Fatalf("ListFiles: %v", err)
		}
		seen := map[string]core.FileInfo{}
		for _, fi := range list {
			seen[path.Base(fi.Path)] = fi
		}
		if fi, ok := seen["large.txt"]; !ok || fi.IsDir || fi.Size != int64(len(large)) {
			t.Errorf("ListFiles: large.txt is %+v", fi)
		}
		if fi, ok := seen["deep"]; !ok || !fi.IsDir {
			t.Errorf("ListFiles: deep is %+v", fi)
		}
		if _, ok := seen["binary.bin"]; !ok || len(seen) != 4 {
			t.Errorf("ListFiles of 4 entries: %+v", list)
		}
	})

	t.Run("FileErrors", func(t *testing.T) {
		if _, err := b.ReadFile(ctx, id, "no/such/file", 0); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("ReadFile of a missing file: %v, want ErrNotFound", err)
		}
		if _, err := b.ListFiles(ctx, id, "no-such-dir"); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("ListFiles of a missing directory: %v, want ErrNotFound", err)
		}
		for _, p := range []string{"../escape", "a/../../escape", "../../../../../../etc/passwd"} {
			if _, err := b.ReadFile(ctx, id, p, 0); !errors.Is(err, core.ErrInvalidPath) {
				t.Errorf("ReadFile %q: %v, want ErrInvalidPath", p, err)
			}
			if err := b.WriteFile(ctx, id, p, []byte("x"), 0o644); !errors.Is(err, core.ErrInvalidPath) {
				t.Errorf("WriteFile %q: %v, want ErrInvalidPath", p, err)
			}
			if _, err := b.ListFiles(ctx, id, p); !errors.Is(err, core.ErrInvalidPath) {
				t.Errorf("ListFiles %q: %v, want ErrInvalidPath", p, err)
			}
		}
		if _, err := b.Exec(ctx, "no-such-sandbox", core.ExecRequest{Command: []string{"true"}}); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("Exec in an unknown sandbox: %v, want ErrNotFound", err)
		}
	})
}

// testLabels checks labels, List by label, Destroy and a second Destroy.
func testLabels(t *testing.T, h Harness) {
	settings := h.Settings(t)
	b := start(t, h, settings, core.SandboxSpec{})
	ctx := context.Background()
	suite := label(t)
	a := create(t, b, core.SandboxSpec{Labels: map[string]string{"suite": suite, "role": "a"}})
	c := create(t, b, core.SandboxSpec{Labels: map[string]string{"suite": suite, "role": "c"}})
	if a.Labels["suite"] != suite || a.Labels["role"] != "a" {
		t.Errorf("Create's info lost the labels: %v", a.Labels)
	}
	ids := func(labels map[string]string) []string {
		t.Helper()
		list, err := b.List(ctx, labels)
		if err != nil {
			t.Fatalf("List %v: %v", labels, err)
		}
		var out []string
		for _, s := range list {
			out = append(out, s.ID)
		}
		slices.Sort(out)
		return out
	}
	both := []string{a.ID, c.ID}
	slices.Sort(both)
	tests := []struct {
		labels map[string]string
		want   []string
	}{
		{map[string]string{"suite": suite}, both},
		{map[string]string{"suite": suite, "role": "a"}, []string{a.ID}},
		{map[string]string{"suite": suite, "role": "nobody"}, nil},
		{map[string]string{"suite": suite + "-other"}, nil},
	}
	for _, tt := range tests {
		if got := ids(tt.labels); !slices.Equal(got, tt.want) {
			t.Errorf("List %v = %v, want %v", tt.labels, got, tt.want)
		}
	}
	if err := b.Destroy(ctx, a.ID); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if got := ids(map[string]string{"suite": suite}); !slices.Equal(got, []string{c.ID}) {
		t.Errorf("List after Destroy = %v, want [%s]", got, c.ID)
	}
	if err := b.Destroy(ctx, a.ID); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("second Destroy: %v, want ErrNotFound", err)
	}
	if _, err := b.Exec(ctx, a.ID, core.ExecRequest{Command: []string{"true"}}); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("Exec in a destroyed sandbox: %v, want ErrNotFound", err)
	}
	// Another process (`rlhost sandbox list/rm`) sees and destroys it.
	other := start(t, h, settings, core.SandboxSpec{})
	if list, err := other.List(ctx, map[string]string{"suite": suite}); err != nil || len(list) != 1 || list[0].ID != c.ID {
		t.Errorf("another backend's List = %+v, %v; want [%s]", list, err, c.ID)
	}
	if err := other.Destroy(ctx, c.ID); err != nil {
		t.Errorf("Destroy from another backend: %v", err)
	}
	if got := ids(map[string]string{"suite": suite}); len(got) != 0 {
		t.Errorf("List after another backend's Destroy = %v", got)
	}
}

// testShutdown checks that Shutdown removes every sandbox of the backend,
// as a second backend sharing its state sees it.
func testShutdown(t *testing.T, h Harness) {
	settings := h.Settings(t)
	ctx := context.Background()
	suite := label(t)
	b := Serve(t, h.New())
	diags, err := configure(ctx, b, settings, core.SandboxSpec{}, t.TempDir())
	if err != nil || diags.HasErrors() {
		t.Fatalf("Configure: %v %v", err, diags.Err())
	}
	var made []string
	for range 3 {
		made = append(made, create(t, b, core.SandboxSpec{Labels: map[string]string{"suite": suite}}).ID)
	}
	if err := b.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := b.Shutdown(ctx); err != nil {
		t.Errorf("a second Shutdown: %v", err)
	}
	if _, err := b.Create(ctx, core.SandboxSpec{}); err == nil {
		t.Errorf("Create after Shutdown succeeded")
	}
	other := start(t, h, settings, core.SandboxSpec{})
	if list, err := other.List(ctx, map[string]string{"suite": suite}); err != nil || len(list) != 0 {
		t.Errorf("after Shutdown, List finds %+v, %v", list, err)
	}
	for _, id := range made {
		if err := other.Destroy(ctx, id); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("after Shutdown, Destroy %s: %v, want ErrNotFound", id, err)
		}
	}
}

// The crash child: a process that configures a backend, makes sandboxes,
// says which, and waits to be killed.
const (
	crashEnv = "RLHOST_SANDBOXTEST_CRASH"
	crashN   = 2
)

type crashOrder struct {
	Settings json.RawMessage `json:"settings"`
	Label    string          `json:"label"`
	BaseDir  string          `json:"base_dir"`
}

// CrashChild turns the test binary into the suite's crash child when the
// suite started it; call it first thing in TestMain, with the Harness's
// New, and return from TestMain when it reports true.
func CrashChild(newBackend func() sandboxplugin.Backend) bool {
	v := os.Getenv(crashEnv)
	if v == "" {
		return false
	}
	fail := func(err error) bool {
		fmt.Println("ERR", err)
		os.Exit(1)
		return true
	}
	var o crashOrder
	if err := json.Unmarshal([]byte(v), &o); err != nil {
		return fail(err)
	}
	var settings map[string]any
	if err := json.Unmarshal(o.Settings, &settings); err != nil {
		return fail(err)
	}
	ctx := context.Background()
	b := newBackend()
	diags, err := configure(ctx, b, settings, core.SandboxSpec{}, o.BaseDir)
	if err != nil {
		return fail(err)
	}
	if diags.HasErrors() {
		return fail(diags.Err())
	}
	for range crashN {
		info, err := b.Create(ctx, core.SandboxSpec{Labels: map[string]string{"suite": o.Label}})
		if err != nil {
			return fail(err)
		}
		fmt.Println("ID", info.ID)
	}
	fmt.Println("READY")
	select {} // until the suite kills it
}

// testCrash kills a process that made sandboxes and checks that the next
// backend to start sweeps them.
func testCrash(t *testing.T, h Harness) {
	settings := h.Settings(t)
	suite := label(t)
	js, err := json.Marshal(settings)
	if err != nil {
		t.Fatal(err)
	}
	order, _ := json.Marshal(crashOrder{Settings: js, Label: suite, BaseDir: t.TempDir()})
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), crashEnv+"="+string(order))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var made []string
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "READY" {
		line := sc.Text()
		id, ok := strings.CutPrefix(line, "ID ")
		if !ok {
			t.Fatalf("crash child: %s (did TestMain call sandboxtest.CrashChild?)", line)
		}
		made = append(made, id)
	}
	if len(made) != crashN {
		t.Fatalf("crash child made %d sandboxes before it exited: %v", len(made), sc.Err())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	// A new backend over the same state, as the next run would start:
	// Configure, and at the latest an explicit ReapOrphans, removes them.
	b := start(t, h, settings, core.SandboxSpec{})
	ctx := context.Background()
	if _, err := b.ReapOrphans(ctx); err != nil {
		t.Errorf("ReapOrphans: %v", err)
	}
	if list, err := b.List(ctx, map[string]string{"suite": suite}); err != nil || len(list) != 0 {
		t.Errorf("the crashed process's sandboxes survived the sweep: %+v, %v", list, err)
	}
	for _, id := range made {
		if err := b.Destroy(ctx, id); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("Destroy %s after the sweep: %v, want ErrNotFound", id, err)
		}
	}
	// A live backend's sandboxes are not orphans.
	mine := create(t, b, core.SandboxSpec{Labels: map[string]string{"suite": suite}})
	second := start(t, h, settings, core.SandboxSpec{})
	if _, err := second.ReapOrphans(ctx); err != nil {
		t.Errorf("ReapOrphans: %v", err)
	}
	if res, err := b.Exec(ctx, mine.ID, core.ExecRequest{Command: []string{"true"}, Timeout: 30 * time.Second}); err != nil || res.ExitCode != 0 {
		t.Errorf("a live backend's sandbox was swept: %+v, %v", res, err)
	}
}
