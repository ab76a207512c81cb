package daytona

import (
	"context"
	"testing"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/plugins/daytona/fakedaytona"
)

// BenchmarkExec compares one exec through the backend (wrapper script,
// framing, separate capped streams) with the SDK's bare ExecuteCommand of
// the same program against the same fake, the baseline: the difference is
// what the wrapper costs per exec, before any network latency.
func BenchmarkExec(b *testing.B) {
	srv := newFake(b, fakedaytona.Options{})
	be, d := configure(b, srv, b.TempDir(), core.SandboxSpec{}, nil)
	if d.HasErrors() {
		b.Fatal(d.Err())
	}
	defer be.Shutdown(context.Background())
	info, err := be.Create(context.Background(), core.SandboxSpec{})
	if err != nil {
		b.Fatal(err)
	}
	s, _ := be.ready()
	h, _, err := be.handle(context.Background(), s, info.ID)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("baseline-sdk-execute", func(b *testing.B) {
		for b.Loop() {
			if _, err := h.Process.ExecuteCommand(context.Background(), "echo hi"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("backend-exec", func(b *testing.B) {
		for b.Loop() {
			if _, err := be.Exec(context.Background(), info.ID, core.ExecRequest{Command: []string{"echo", "hi"}}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
