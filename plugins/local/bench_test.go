package local

import (
	"context"
	"os/exec"
	"testing"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
)

func configOf(js []byte) schema.Config { return schema.Config{Name: "bench", JSON: js} }

// Go benchmarks for the two hot paths; plugins/local/bench prints the full
// comparison table (bubblewrap, pool, concurrency).

func BenchmarkBareExecTrue(b *testing.B) {
	for b.Loop() {
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSandboxExecTrue(b *testing.B) {
	bk := newBenchBackend(b, New())
	info, err := bk.Create(context.Background(), core.SandboxSpec{})
	if err != nil {
		b.Fatal(err)
	}
	req := core.ExecRequest{Command: []string{"/bin/true"}}
	for b.Loop() {
		if r, err := bk.Exec(context.Background(), info.ID, req); err != nil || r.ExitCode != 0 {
			b.Fatal(err, r)
		}
	}
}

func BenchmarkSandboxCreateExecDestroy(b *testing.B) {
	bk := newBenchBackend(b, New())
	ctx := context.Background()
	for b.Loop() {
		info, err := bk.Create(ctx, core.SandboxSpec{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := bk.Exec(ctx, info.ID, core.ExecRequest{Command: []string{"/bin/true"}}); err != nil {
			b.Fatal(err)
		}
		if err := bk.Destroy(ctx, info.ID); err != nil {
			b.Fatal(err)
		}
	}
}

func newBenchBackend(b *testing.B, be *Backend) *Backend {
	b.Helper()
	cfg := []byte(`{"state_dir": "` + b.TempDir() + `"}`)
	if d := be.Configure(context.Background(), configOf(cfg), core.SandboxSpec{}); d.HasErrors() {
		b.Fatal(d.Err())
	}
	b.Cleanup(func() { be.Shutdown(context.Background()) })
	return be
}
