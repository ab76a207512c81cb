package local

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/core/sdk/sandboxplugin/sandboxtest"
	"github.com/rlhost/rlhost/plugins/backendkit/procowner"
)

func TestMain(m *testing.M) {
	// The test binary is also the sandbox init.
	if Reexec() {
		return
	}
	if sandboxtest.CrashChild(newForSuite) {
		return
	}
	if dir := os.Getenv(ownerEnv); dir != "" {
		ownerMain(dir)
		return
	}
	if dir := os.Getenv(rootlessEnv); dir != "" {
		rootlessMain(dir)
		return
	}
	os.Exit(m.Run())
}

// newBackend configures a backend with its own state dir; it is shut down
// at the end of the test.
func newBackend(t *testing.T, cfg map[string]any, spec core.SandboxSpec) *Backend {
	t.Helper()
	if cfg == nil {
		cfg = map[string]any{}
	}
	if _, ok := cfg["state_dir"]; !ok {
		cfg["state_dir"] = t.TempDir()
	}
	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b := New()
	diags := b.Configure(context.Background(), schema.Config{Name: "test", JSON: js}, spec)
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

func create(t *testing.T, b *Backend, spec core.SandboxSpec) string {
	t.Helper()
	info, err := b.Create(context.Background(), spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return info.ID
}

func execOK(t *testing.T, b *Backend, id string, argv ...string) core.ExecResult {
	t.Helper()
	res, err := b.Exec(context.Background(), id, core.ExecRequest{Command: argv, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("Exec %q: %v", argv, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("Exec %q: exit %d, stdout %q, stderr %q", argv, res.ExitCode, res.Stdout, res.Stderr)
	}
	return res
}

func sh(script string) []string { return []string{"/bin/sh", "-c", script} }

// procStart is a process's start token, "" once it is gone.
func procStart(pid int) string { return procowner.ProcessStart(pid) }

func readProcStat(pid int) (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	return string(b), err
}
