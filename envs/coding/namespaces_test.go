package coding

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/core/sdk/envplugin"
	"github.com/rlhost/rlhost/core/sdk/envplugin/envtest"
	"github.com/rlhost/rlhost/plugins/local"
)

// TestNamespacedSandbox scores completions in the local backend's namespace
// mode, where a fork bomb is contained by the sandbox's pids limit.
func TestNamespacedSandbox(t *testing.T) {
	ctx := context.Background()
	spec := core.SandboxSpec{Limits: core.Limits{Pids: 64, MemoryBytes: 512 << 20}}
	b := local.New()
	bcfg, _ := json.Marshal(map[string]any{"isolation": "namespaces", "state_dir": t.TempDir()})
	if diags := b.Configure(ctx, schema.Config{Name: "local", JSON: bcfg}, spec); diags.HasErrors() {
		if err := diags.Err(); strings.Contains(err.Error(), "unavailable") {
			t.Skipf("SKIPPING: the local backend cannot isolate with namespaces on this machine: %v", err)
		}
		t.Fatalf("configure local backend: %v", diags.Err())
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	client := envtest.Serve(t, New())
	if diags := client.Configure(ctx, schema.Config{Name: "coding", JSON: configJSON(t, map[string]any{"timeout": "3s"})}); diags.HasErrors() {
		t.Fatalf("configure coding env: %v", diags.Err())
	}
	ts, err := client.Tasks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tasks := map[string]core.Task{}
	for _, x := range ts {
		tasks[x.ID] = x
	}
	tests := []scoreCase{
		{"correct", TaskMaxSubarray, fenced(kadane), 1, "", ""},
		{"fork bomb", TaskMaxSubarray, fenced("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"), -1, "", "*"},
		{"memory hog", TaskMaxSubarray, fenced("def max_subarray(nums):\n    x = bytearray(1 << 30)\n    return 0"), -1, "", "*"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sb := envtest.NewSandbox(t, b, spec, time.Second)
			_, obs := envtest.Episode(t, client, envplugin.Episode{ID: tc.name, Task: tasks[tc.task], Sandbox: sb}, 1,
				func(int, []core.Message) core.Message {
					return core.Message{Role: core.RoleAssistant, Content: tc.completion}
				})
			checkScore(t, obs, tc)
		})
	}
}
