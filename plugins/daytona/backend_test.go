package daytona

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	sdkerrors "github.com/daytonaio/daytona/libs/sdk-go/pkg/errors"
	"github.com/hashicorp/go-hclog"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/plugins/backendkit/procowner"
	"github.com/rlhost/rlhost/plugins/daytona/fakedaytona"
)

// env bundles a fake Daytona and a backend configured against it.
type env struct {
	srv      *fakedaytona.Server
	b        *Backend
	stateDir string
}

func newFake(t testing.TB, opts fakedaytona.Options) *fakedaytona.Server {
	t.Helper()
	srv, err := fakedaytona.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv
}

// settingsJSON is the decoded block the host would send, with the test
// defaults (fast pacing) merged with overrides.
func settingsJSON(t testing.TB, srv *fakedaytona.Server, over map[string]any) []byte {
	t.Helper()
	m := map[string]any{
		"api_key": srv.APIKey, "api_url": srv.URL, "create_rate": 1000, "max_retries": 4,
		"api_timeout": "10s", "start_timeout": "20s",
	}
	for k, v := range over {
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func configure(t testing.TB, srv *fakedaytona.Server, stateDir string, spec core.SandboxSpec, over map[string]any) (*Backend, schema.Diagnostics) {
	t.Helper()
	over2 := map[string]any{"state_dir": stateDir}
	for k, v := range over {
		over2[k] = v
	}
	b := New()
	d := b.Configure(context.Background(), schema.Config{Name: "t", RunID: "run-1", JSON: settingsJSON(t, srv, over2)}, spec)
	return b, d
}

func newEnv(t *testing.T, over map[string]any) *env {
	t.Helper()
	srv := newFake(t, fakedaytona.Options{})
	dir := t.TempDir()
	b, d := configure(t, srv, dir, core.SandboxSpec{}, over)
	if d.HasErrors() {
		t.Fatalf("configure: %v", d.Err())
	}
	t.Cleanup(func() { b.Shutdown(context.Background()) })
	return &env{srv: srv, b: b, stateDir: dir}
}

func (e *env) create(t *testing.T, spec core.SandboxSpec) core.SandboxInfo {
	t.Helper()
	info, err := e.b.Create(context.Background(), spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return info
}

func (e *env) exec(t *testing.T, id string, req core.ExecRequest) core.ExecResult {
	t.Helper()
	res, err := e.b.Exec(context.Background(), id, req)
	if err != nil {
		t.Fatalf("exec %q: %v", req.Command, err)
	}
	return res
}

func TestHappyPath(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	info := e.create(t, core.SandboxSpec{Image: "python:3.12-slim", Env: map[string]string{"GREETING": "hi"},
		Labels: map[string]string{"task": "t1"}, TTL: 90 * time.Minute})

	fs, ok := e.srv.Sandbox(info.ID)
	if !ok {
		t.Fatalf("sandbox %s not on the server", info.ID)
	}
	for k, want := range map[string]string{managedLabel: "true", runLabel: "run-1", "task": "t1",
		ownerHostLabel: e.b.owner.Host, ownerPIDLabel: strconv.Itoa(os.Getpid())} {
		if fs.Labels[k] != want {
			t.Errorf("label %s = %q, want %q", k, fs.Labels[k], want)
		}
	}
	if fs.Dockerfile != "FROM python:3.12-slim" || fs.AutoStopInterval != 90 || fs.AutoDeleteInterval != 0 || !fs.NetworkBlockAll {
		t.Errorf("create params: dockerfile %q autostop %d autodelete %d blockall %v", fs.Dockerfile, fs.AutoStopInterval, fs.AutoDeleteInterval, fs.NetworkBlockAll)
	}

	res := e.exec(t, info.ID, core.ExecRequest{Command: []string{"sh", "-c", `echo "$GREETING $1"; echo oops >&2; exit 3`, "sh", "world"}})
	if res.Stdout != "hi world\n" || res.Stderr != "oops\n" || res.ExitCode != 3 || res.TimedOut || res.Isolation != "cloud" {
		t.Errorf("exec result %+v", res)
	}

	if err := e.b.WriteFile(ctx, info.ID, "sub/data.bin", []byte("a\x00\xffb"), 0o640); err != nil {
		t.Fatal(err)
	}
	got, err := e.b.ReadFile(ctx, info.ID, "/workspace/sub/data.bin", 0)
	if err != nil || string(got) != "a\x00\xffb" {
		t.Fatalf("read back %q, %v", got, err)
	}
	res = e.exec(t, info.ID, core.ExecRequest{Command: []string{"cat", "data.bin"}, Dir: "sub"})
	if res.Stdout != "a\x00\xffb" {
		t.Errorf("exec sees %q", res.Stdout)
	}
	files, err := e.b.ListFiles(ctx, info.ID, "sub")
	if err != nil || len(files) != 1 || files[0].Path != "sub/data.bin" || files[0].Size != 4 || files[0].Mode&0o777 != 0o640 {
		t.Fatalf("list: %+v, %v", files, err)
	}

	list, err := e.b.List(ctx, map[string]string{"task": "t1"})
	if err != nil || len(list) != 1 || list[0].ID != info.ID {
		t.Fatalf("list by label: %+v, %v", list, err)
	}
	if list, _ := e.b.List(ctx, map[string]string{"task": "other"}); len(list) != 0 {
		t.Errorf("list by other label: %+v", list)
	}

	if err := e.b.Destroy(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if n := len(e.srv.Sandboxes()); n != 0 {
		t.Errorf("%d sandboxes left", n)
	}
	if err := e.b.Destroy(ctx, info.ID); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("second destroy: %v, want ErrNotFound", err)
	}
	if ents, _ := os.ReadDir(e.stateDir); len(ents) != 0 {
		t.Errorf("state dir not empty after destroy: %v", ents)
	}
}

func TestFilePathsConfined(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	info := e.create(t, core.SandboxSpec{})
	for _, p := range []string{"../etc/passwd", "/etc/passwd", "/workspace/../root/x", "/workspacex/y"} {
		if _, err := e.b.ReadFile(context.Background(), info.ID, p, 0); !errors.Is(err, core.ErrInvalidPath) {
			t.Errorf("read %q: %v, want ErrInvalidPath", p, err)
		}
		if err := e.b.WriteFile(context.Background(), info.ID, p, nil, 0); !errors.Is(err, core.ErrInvalidPath) {
			t.Errorf("write %q: %v, want ErrInvalidPath", p, err)
		}
	}
	if _, err := e.b.ReadFile(context.Background(), info.ID, "missing.txt", 0); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("read missing: %v, want ErrNotFound", err)
	}
	if err := e.b.WriteFile(context.Background(), info.ID, "big", make([]byte, 100), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := e.b.ReadFile(context.Background(), info.ID, "big", 99); !errors.Is(err, core.ErrTooLarge) {
		t.Errorf("read over max: %v, want ErrTooLarge", err)
	}
}

func TestRateLimitStormDuringCreate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.srv.RateLimitCreates(3, 0)
	info := e.create(t, core.SandboxSpec{})
	if got := e.srv.Count("POST", "/api/sandbox", 429); got != 3 {
		t.Errorf("%d rate-limited creates, want 3", got)
	}
	if n := len(e.srv.Sandboxes()); n != 1 || e.srv.Creates() != 1 {
		t.Errorf("%d sandboxes, %d creates; want 1 and 1", n, e.srv.Creates())
	}
	if res := e.exec(t, info.ID, core.ExecRequest{Command: []string{"true"}}); res.ExitCode != 0 {
		t.Errorf("exec after storm: %+v", res)
	}
}

func TestRateLimitHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.srv.RateLimitCreates(1, time.Second)
	start := time.Now()
	e.create(t, core.SandboxSpec{})
	// Retry-After is a lower bound on the wait, not a speed measurement.
	if waited := time.Since(start); waited < time.Second {
		t.Errorf("retried after %v, before the 1s Retry-After", waited)
	}
}

func TestRateLimitStormOutlastsRetries(t *testing.T) {
	t.Parallel()
	e := newEnv(t, map[string]any{"max_retries": 1})
	e.srv.RateLimitCreates(10, 0)
	_, err := e.b.Create(context.Background(), core.SandboxSpec{})
	if !errors.Is(err, core.ErrUnavailable) {
		t.Fatalf("create under a long 429 storm: %v, want ErrUnavailable", err)
	}
	if n := len(e.srv.Sandboxes()); n != 0 {
		t.Errorf("%d sandboxes after failed create", n)
	}
	if ents, _ := os.ReadDir(e.stateDir); len(ents) != 0 {
		t.Errorf("state record left after a create that made nothing: %v", ents)
	}
}

func TestCreateFails(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		fault func(*fakedaytona.Server)
	}{
		{"quota 400", func(s *fakedaytona.Server) { s.FailCreates(1, 400) }},
		{"server 500 on every attempt", func(s *fakedaytona.Server) { s.FailCreates(3, 500) }},
		{"sandbox ends in error", func(s *fakedaytona.Server) { s.FailStarts(1) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, map[string]any{"max_retries": 2})
			tt.fault(e.srv)
			if _, err := e.b.Create(context.Background(), core.SandboxSpec{}); err == nil {
				t.Fatal("create succeeded")
			}
			if n := len(e.srv.Sandboxes()); n != 0 {
				t.Errorf("%d sandboxes left after failed create", n)
			}
			// The backend goes on: the next create works.
			e.create(t, core.SandboxSpec{})
		})
	}
}

func TestExecTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	info := e.create(t, core.SandboxSpec{})
	res := e.exec(t, info.ID, core.ExecRequest{Command: []string{"sleep", "30"}, Timeout: time.Second})
	if !res.TimedOut || res.ExitCode != 137 || res.Signal != "SIGKILL" || res.LimitHit() != "timed_out" {
		t.Errorf("sleep past timeout: %+v", res)
	}
	e.srv.SetExecDelay(3 * time.Second)
	res = e.exec(t, info.ID, core.ExecRequest{Command: []string{"true"}, Timeout: 1500 * time.Millisecond})
	if !res.TimedOut {
		t.Errorf("slow daemon past timeout: %+v", res)
	}
	e.srv.SetExecDelay(0)
	if res := e.exec(t, info.ID, core.ExecRequest{Command: []string{"echo", "ok"}, Timeout: 5 * time.Second}); res.TimedOut || res.Stdout != "ok\n" {
		t.Errorf("exec within timeout: %+v", res)
	}
}

func TestExecOutputCap(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	info := e.create(t, core.SandboxSpec{})
	res := e.exec(t, info.ID, core.ExecRequest{
		Command:        []string{"sh", "-c", "head -c 5000 /dev/zero; head -c 10 /dev/zero >&2"},
		MaxOutputBytes: 1000,
	})
	if len(res.Stdout) != 1000 || len(res.Stderr) != 10 || !res.OutputTruncated || res.ExitCode != 0 {
		t.Errorf("stdout %d stderr %d truncated %v exit %d", len(res.Stdout), len(res.Stderr), res.OutputTruncated, res.ExitCode)
	}
	res = e.exec(t, info.ID, core.ExecRequest{Command: []string{"sh", "-c", "head -c 1000 /dev/zero"}, MaxOutputBytes: 1000})
	if len(res.Stdout) != 1000 || res.OutputTruncated {
		t.Errorf("exactly at cap: %d bytes, truncated %v", len(res.Stdout), res.OutputTruncated)
	}
}

func TestExecStdinAndLargeScripts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	info := e.create(t, core.SandboxSpec{})
	in := []byte("line1\nline2\x00\xfe\n")
	res := e.exec(t, info.ID, core.ExecRequest{Command: []string{"cat"}, Stdin: in})
	if res.Stdout != string(in) {
		t.Errorf("stdin round trip: %q", res.Stdout)
	}
	big := []byte(strings.Repeat("0123456789abcdef", 16<<10)) // 256 KiB: script goes by file
	res = e.exec(t, info.ID, core.ExecRequest{Command: []string{"wc", "-c"}, Stdin: big})
	if strings.TrimSpace(res.Stdout) != strconv.Itoa(len(big)) {
		t.Errorf("large stdin: wc says %q (stderr %q)", res.Stdout, res.Stderr)
	}
	files, err := e.b.ListFiles(context.Background(), info.ID, ".")
	if err != nil || len(files) != 0 {
		t.Errorf("exec script left files in the workspace: %+v %v", files, err)
	}
	res = e.exec(t, info.ID, core.ExecRequest{Command: []string{"no-such-program-xyz"}})
	if res.ExitCode != 127 || !strings.Contains(res.Stderr, "no-such-program-xyz") {
		t.Errorf("missing program: %+v", res)
	}
}

func TestDeleteFailsThenSucceeds(t *testing.T) {
	t.Parallel()
	e := newEnv(t, map[string]any{"max_retries": 3})
	ctx := context.Background()

	// Two failures are absorbed by the retries of one Destroy.
	a := e.create(t, core.SandboxSpec{})
	e.srv.FailDeletes(2, 500)
	if err := e.b.Destroy(ctx, a.ID); err != nil {
		t.Fatalf("destroy with 2 transient failures: %v", err)
	}
	if _, ok := e.srv.Sandbox(a.ID); ok {
		t.Error("sandbox still there")
	}

	// Persistent failure: stopped instead, reported, and kept on record;
	// a later Destroy succeeds.
	b := e.create(t, core.SandboxSpec{})
	e.srv.FailDeletes(100, 500)
	err := e.b.Destroy(ctx, b.ID)
	if !errors.Is(err, ErrStoppedInstead) {
		t.Fatalf("destroy under persistent failure: %v, want ErrStoppedInstead", err)
	}
	if s, _ := e.srv.Sandbox(b.ID); s.State != "stopped" {
		t.Errorf("state after failed delete = %q, want stopped", s.State)
	}
	if ents, _ := os.ReadDir(e.stateDir); len(ents) != 1 {
		t.Errorf("state record dropped for an undeleted sandbox: %v", ents)
	}
	e.srv.FailDeletes(0, 0)
	if err := e.b.Destroy(ctx, b.ID); err != nil {
		t.Fatalf("destroy once the API recovers: %v", err)
	}
	if n := len(e.srv.Sandboxes()); n != 0 {
		t.Errorf("%d sandboxes left", n)
	}
}

func TestShutdownLeavesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, map[string]any{"max_sandboxes": 10})
	for i := 0; i < 5; i++ {
		e.create(t, core.SandboxSpec{})
	}
	e.srv.FailDeletes(1, 503)
	if err := e.b.Shutdown(context.Background()); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if n := len(e.srv.Sandboxes()); n != 0 {
		t.Errorf("%d sandboxes left on the server", n)
	}
	if ents, _ := os.ReadDir(e.stateDir); len(ents) != 0 {
		t.Errorf("state file left: %v", ents)
	}
	if _, err := e.b.Create(context.Background(), core.SandboxSpec{}); !errors.Is(err, core.ErrUnavailable) {
		t.Errorf("create after shutdown: %v", err)
	}
}

func TestShutdownWithCancelledContext(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.create(t, core.SandboxSpec{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // Ctrl-C: the host's context is already gone
	if err := e.b.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if n := len(e.srv.Sandboxes()); n != 0 {
		t.Errorf("%d sandboxes left", n)
	}
}

func TestConcurrentCreatesCapped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, map[string]any{"max_sandboxes": 3, "max_starting": 2})
	errs := make(chan error, 8)
	ids := make(chan string, 8)
	for i := 0; i < 8; i++ {
		go func() {
			info, err := e.b.Create(context.Background(), core.SandboxSpec{})
			if err == nil {
				ids <- info.ID
				err = e.b.Destroy(context.Background(), info.ID)
			}
			errs <- err
		}()
	}
	for i := 0; i < 8; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if len(ids) != 8 || len(e.srv.Sandboxes()) != 0 {
		t.Errorf("%d created, %d left", len(ids), len(e.srv.Sandboxes()))
	}
}

// deadPID returns the pid of a process that has exited.
func deadPID(t *testing.T) int {
	t.Helper()
	p, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	return p.Pid
}

func TestOrphanSweepAtStart(t *testing.T) {
	t.Parallel()
	srv := newFake(t, fakedaytona.Options{})
	dir := t.TempDir()
	host, _ := os.Hostname()
	dead := strconv.Itoa(deadPID(t))
	mk := func(name string, l map[string]string) string {
		t.Helper()
		id, err := srv.AddSandbox(name, l)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	managed := func(host, pid string) map[string]string {
		return map[string]string{managedLabel: "true", ownerHostLabel: host, ownerPIDLabel: pid}
	}
	orphan := mk("orphan", managed(host, dead))
	live := mk("live", managed(host, strconv.Itoa(os.Getppid())))
	elsewhere := mk("elsewhere", managed("other-host", dead))
	foreign := mk("not-rlhost", map[string]string{ownerHostLabel: host, ownerPIDLabel: dead})
	// Recycled pid: alive now, but not the process that made the sandbox.
	recycled := mk("recycled", map[string]string{managedLabel: "true", ownerHostLabel: host,
		ownerPIDLabel: strconv.Itoa(os.Getppid()), ownerStartLabel: "00000000/1"})
	// A crash record whose sandbox lost its labels (say a create whose
	// response never arrived): found through the state file alone.
	unlabelled := mk("rlhost-crashed", nil)
	rec := stateRecord{Owner: procowner.Owner{Host: host, PID: deadPID(t)}, APIURL: srv.URL,
		Sandboxes: map[string]stateEntry{"rlhost-crashed": {}, "rlhost-never-made": {}}}
	if err := (procowner.Records{Dir: dir}).Write(filepath.Join(dir, "old.json"), rec); err != nil {
		t.Fatal(err)
	}

	b, d := configure(t, srv, dir, core.SandboxSpec{}, nil)
	defer b.Shutdown(context.Background())
	if d.HasErrors() {
		t.Fatal(d.Err())
	}
	for _, id := range []string{orphan, recycled, unlabelled} {
		if _, ok := srv.Sandbox(id); ok {
			t.Errorf("orphan %s survived the sweep", id)
		}
	}
	for _, id := range []string{live, elsewhere, foreign} {
		if _, ok := srv.Sandbox(id); !ok {
			t.Errorf("sweep deleted %s, which is not an orphan of this host", id)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "old.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dead record not removed: %v", err)
	}
	var warned bool
	for _, x := range d {
		warned = warned || (strings.Contains(x.Summary, "removed sandboxes of dead rlhost runs") && strings.HasPrefix(x.Detail, "3 sandbox(es)"))
	}
	if !warned {
		t.Errorf("no diagnostic about the sweep: %+v", d)
	}
	// ReapOrphans again finds nothing more.
	if again, err := b.ReapOrphans(context.Background()); err != nil || len(again) != 0 {
		t.Errorf("second sweep: %+v, %v", again, err)
	}
}

func TestBadAPIKey(t *testing.T) {
	t.Parallel()
	srv := newFake(t, fakedaytona.Options{})
	b, d := configure(t, srv, t.TempDir(), core.SandboxSpec{}, map[string]any{"api_key": "wrong-key"})
	defer b.Shutdown(context.Background())
	if !d.HasErrors() {
		t.Fatal("configure accepted a bad key")
	}
	var found bool
	for _, x := range d {
		if x.Severity == schema.Error && len(x.Path) == 1 && x.Path[0] == "api_key" {
			found = true
			if strings.Contains(x.Summary+x.Detail, "wrong-key") {
				t.Errorf("diagnostic leaks the key: %+v", x)
			}
		}
	}
	if !found {
		t.Errorf("no error on api_key: %+v", d)
	}

	// A key revoked after start: Create says so clearly.
	e := newEnv(t, nil)
	e.srv.SetAPIKey("rotated")
	_, err := e.b.Create(context.Background(), core.SandboxSpec{})
	if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), apiKeyEnv) {
		t.Errorf("create with revoked key: %v", err)
	}
}

func TestDestroyForeign(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	// Another rlhost process made this one.
	other, d := configure(t, e.srv, t.TempDir(), core.SandboxSpec{}, nil)
	if d.HasErrors() {
		t.Fatal(d.Err())
	}
	defer other.Shutdown(context.Background())
	made, err := other.Create(context.Background(), core.SandboxSpec{Labels: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	mine := made.ID
	theirs, _ := e.srv.AddSandbox("user-sandbox", map[string]string{"k": "v"})
	list, err := e.b.List(context.Background(), map[string]string{"k": "v"})
	if err != nil || len(list) != 1 || list[0].ID != mine {
		t.Fatalf("list: %+v %v", list, err)
	}
	if res := e.exec(t, mine, core.ExecRequest{Command: []string{"echo", "x"}}); res.Stdout != "x\n" {
		t.Errorf("exec in foreign sandbox: %+v", res)
	}
	if err := e.b.Destroy(context.Background(), theirs); err == nil {
		t.Error("destroyed a sandbox rlhost did not make")
	}
	if err := e.b.Destroy(context.Background(), mine); err != nil {
		t.Fatal(err)
	}
	if err := e.b.Destroy(context.Background(), "no-such-id"); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("destroy unknown: %v", err)
	}
}

func TestCrashRecordWrittenBeforeCreateReturns(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.srv.RateLimitCreates(1, 2*time.Second) // holds Create in its retry wait
	done := make(chan error, 1)
	go func() { _, err := e.b.Create(context.Background(), core.SandboxSpec{}); done <- err }()
	var rec stateRecord
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if len(readRecords(t, e.stateDir)) > 0 {
			rec = readRecords(t, e.stateDir)[0]
			break
		}
	}
	if len(rec.Sandboxes) != 1 {
		t.Fatalf("no record while the create call was pending: %+v", rec)
	}
	for name, ent := range rec.Sandboxes {
		if !strings.HasPrefix(name, "rlhost-") || ent.ID != "" {
			t.Errorf("pending entry %q %+v", name, ent)
		}
	}
	if rec.Owner.PID != os.Getpid() || rec.APIURL != e.srv.URL || rec.RunID != "run-1" {
		t.Errorf("record header %+v", rec)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	recs := readRecords(t, e.stateDir)
	for _, ent := range recs[0].Sandboxes {
		if ent.ID == "" {
			t.Errorf("id not recorded after create: %+v", recs)
		}
	}
}

func readRecords(t *testing.T, dir string) []stateRecord {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	var out []stateRecord
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		var r stateRecord
		if r.DecodeRecord(b) == nil {
			out = append(out, r)
		}
	}
	return out
}

func TestShutdownDuringCreate(t *testing.T) {
	t.Parallel()
	srv := newFake(t, fakedaytona.Options{StartPolls: 1 << 20}) // never reaches STARTED
	b, d := configure(t, srv, t.TempDir(), core.SandboxSpec{}, nil)
	if d.HasErrors() {
		t.Fatal(d.Err())
	}
	done := make(chan error, 1)
	go func() { _, err := b.Create(context.Background(), core.SandboxSpec{}); done <- err }()
	for deadline := time.Now().Add(10 * time.Second); srv.Creates() == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if srv.Creates() == 0 {
		t.Fatal("create never reached the server")
	}
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if err := <-done; err == nil {
		t.Error("create succeeded through shutdown")
	}
	if n := len(srv.Sandboxes()); n != 0 {
		t.Errorf("%d sandboxes left after shutdown interrupted a create", n)
	}
}

func TestStoppedSandboxFreesItsSlot(t *testing.T) {
	t.Parallel()
	e := newEnv(t, map[string]any{"max_sandboxes": 1, "max_retries": 1})
	a := e.create(t, core.SandboxSpec{})
	e.srv.FailDeletes(100, 500)
	if err := e.b.Destroy(context.Background(), a.ID); !errors.Is(err, ErrStoppedInstead) {
		t.Fatalf("destroy: %v", err)
	}
	e.srv.FailDeletes(0, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := e.b.Create(ctx, core.SandboxSpec{}); err != nil {
		t.Fatalf("create after the only slot's sandbox was stopped: %v", err)
	}
	if err := e.b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(e.srv.Sandboxes()); n != 0 {
		t.Errorf("%d sandboxes left; the stopped one must be deleted at shutdown", n)
	}
}

func TestTransientFaultsAbsorbed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, map[string]any{"max_retries": 3})
	ctx := context.Background()

	// A create whose response is lost is adopted by name, not repeated.
	e.srv.LoseCreateResponses(1)
	info := e.create(t, core.SandboxSpec{})
	if n := len(e.srv.Sandboxes()); n != 1 || e.srv.Creates() != 1 {
		t.Fatalf("%d sandboxes after a lost create response, %d creates; want 1, 1", n, e.srv.Creates())
	}

	// An exec refused with 429 runs once, after a retry.
	e.srv.RateLimitExecs(2)
	res := e.exec(t, info.ID, core.ExecRequest{Command: []string{"sh", "-c", "echo x >> runs; wc -l < runs"}})
	if strings.TrimSpace(res.Stdout) != "1" {
		t.Errorf("exec ran %q times", res.Stdout)
	}

	// 503s on the control plane are retried for list and destroy, and
	// each retry is announced.
	var logs bytes.Buffer
	e.b.log = hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
	e.srv.Unavailable(2)
	if list, err := e.b.List(ctx, nil); err != nil || len(list) != 1 {
		t.Errorf("list through 503s: %+v %v", list, err)
	}
	if !strings.Contains(logs.String(), "daytona list sandboxes: HTTP 503; retry 1 of 3 in ") ||
		!strings.Contains(logs.String(), "retry 2 of 3") {
		t.Errorf("retries not announced: %q", logs.String())
	}
	e.srv.Unavailable(2)
	if err := e.b.Destroy(ctx, info.ID); err != nil {
		t.Errorf("destroy through 503s: %v", err)
	}
	if n := len(e.srv.Sandboxes()); n != 0 {
		t.Errorf("%d sandboxes left", n)
	}
}

// An API that cannot be reached (nothing listens at api_url, or its host
// does not resolve) fails each call at once, without the retries meant
// for answers that say "try again", and says so without the request's
// URL and query.
func TestUnreachableAPIFailsFast(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	js, err := json.Marshal(map[string]any{"api_key": "k", "api_url": "http://" + addr + "/api", "max_retries": 4,
		"api_timeout": "10s", "state_dir": t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	b := New()
	b.log = hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
	defer b.Shutdown(context.Background())
	d := b.Configure(context.Background(), schema.Config{Name: "t", RunID: "run-1", JSON: js}, core.SandboxSpec{})
	if d.HasErrors() {
		t.Fatalf("configure: %v", d.Err())
	}
	_, err = b.List(context.Background(), map[string]string{"a": "b"})
	want := "daytona list sandboxes: unavailable: cannot reach the Daytona API at http://" + addr + "/api: connection refused: nothing listens at " + addr
	if !errors.Is(err, core.ErrUnavailable) || err == nil || err.Error() != want {
		t.Fatalf("list = %v; want %q", err, want)
	}
	if logs.Len() != 0 {
		t.Errorf("retried: %q", logs.String())
	}
	// The configure's orphan sweep said the same, as a warning.
	if len(d) != 1 || d[0].Severity != schema.Warning || strings.Contains(d[0].Detail, "labels=") || !strings.Contains(d[0].Detail, "cannot reach the Daytona API") {
		t.Errorf("configure diagnostics %+v", d)
	}
	// The SDK flattens its transport errors to text; they read the same.
	flat := &sdkerrors.DaytonaError{Message: `Get "https://app.daytona.io/api/sandbox?labels=%7B%22x%22%7D": dial tcp: lookup app.daytona.io on 10.0.0.53:53: no such host`}
	if retryable(context.Background(), flat) {
		t.Error("an SDK error for an unknown host is retried")
	}
	if got := classify("create sandbox", flat).Error(); got != "daytona create sandbox: unavailable: cannot reach the Daytona API: dial tcp: lookup app.daytona.io on 10.0.0.53:53: no such host" {
		t.Errorf("classify = %q", got)
	}
}
