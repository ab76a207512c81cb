package coding

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/core/sdk/envplugin"
	"github.com/rlhost/rlhost/core/sdk/envplugin/envtest"
	"github.com/rlhost/rlhost/plugins/local"
)

// benchBackend is the local backend without isolation, the cheapest real
// sandbox, so the numbers show the env's own cost.
func benchBackend(b *testing.B) *local.Backend {
	b.Helper()
	be := local.New()
	cfg, _ := json.Marshal(map[string]any{"isolation": "none", "state_dir": b.TempDir()})
	if diags := be.Configure(context.Background(), schema.Config{Name: "local", JSON: cfg}, core.SandboxSpec{}); diags.HasErrors() {
		b.Fatalf("configure local backend: %v", diags.Err())
	}
	b.Cleanup(func() { _ = be.Shutdown(context.Background()) })
	return be
}

// BenchmarkExecPythonBaseline is the floor an episode is measured against:
// one `python3 -I -c pass` in a sandbox that already exists.
func BenchmarkExecPythonBaseline(b *testing.B) {
	be := benchBackend(b)
	sb := envtest.NewSandbox(b, be, core.SandboxSpec{}, 5*time.Second)
	ctx := context.Background()
	for b.Loop() {
		res, err := sb.Exec(ctx, core.ExecRequest{Command: []string{"python3", "-I", "-c", "pass"},
			Env: map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin"}})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("exec: %v %+v", err, res)
		}
	}
}

// BenchmarkScoreEpisode scores a correct sort_list completion (8 tests) in
// an existing sandbox, through the gRPC plugin boundary: the runner and the
// candidate child start per episode; expected outputs are cached after the
// first.
func BenchmarkScoreEpisode(b *testing.B) {
	be := benchBackend(b)
	client := envtest.Serve(b, New())
	ctx := context.Background()
	cfg, _ := json.Marshal(map[string]any{"timeout": "10s"})
	if diags := client.Configure(ctx, schema.Config{Name: "coding", JSON: cfg}); diags.HasErrors() {
		b.Fatalf("configure: %v", diags.Err())
	}
	ts, err := client.Tasks(ctx)
	if err != nil {
		b.Fatal(err)
	}
	sb := envtest.NewSandbox(b, be, core.SandboxSpec{}, 5*time.Second)
	reply := core.Message{Role: core.RoleAssistant, Content: fenced(bubbleSort)}
	i := 0
	for b.Loop() {
		i++
		sess, _, err := client.NewEpisode(ctx, envplugin.Episode{ID: fmt.Sprintf("bench-%d", i), Task: ts[0], Sandbox: sb})
		if err != nil {
			b.Fatal(err)
		}
		obs, err := sess.Step(ctx, reply)
		if err != nil || obs.Reward != 1 {
			b.Fatalf("step: %v reward %v %v", err, obs.Reward, obs.Info)
		}
		if _, err := sess.End(ctx, ""); err != nil {
			b.Fatal(err)
		}
	}
}
