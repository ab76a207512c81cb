package main

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/core/sdk/envplugin"
	"github.com/rlhost/rlhost/core/sdk/envplugin/envtest"
	"github.com/rlhost/rlhost/plugins/local"
)

func TestMain(m *testing.M) {
	// The local backend re-executes this test binary as its sandbox helper.
	if local.Reexec() {
		return
	}
	os.Exit(m.Run())
}

func TestEchoEpisodes(t *testing.T) {
	ctx := context.Background()
	b := local.New()
	bcfg, _ := json.Marshal(map[string]any{"isolation": "none", "state_dir": t.TempDir()})
	if diags := b.Configure(ctx, schema.Config{Name: "local", JSON: bcfg}, core.SandboxSpec{}); diags.HasErrors() {
		t.Fatalf("configure local backend: %v", diags.Err())
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })

	client := envtest.Serve(t, newEnv())
	// path is left to its schema default, as in a job file that omits it.
	if diags := envtest.Configure(t, client, "echo", map[string]any{"words": []string{"alpha", "beta"}}); diags.HasErrors() {
		t.Fatalf("configure: %v", diags.Err())
	}
	tasks, err := client.Tasks(ctx)
	if err != nil || len(tasks) != 2 {
		t.Fatalf("tasks = %v, %v", tasks, err)
	}
	tests := []struct {
		name   string
		task   core.Task
		reply  string
		reward float64
	}{
		{"exact", tasks[0], "alpha", 1},
		{"with newline", tasks[1], "beta\n", 1},
		{"wrong word", tasks[0], "beta", 0},
		{"extra words", tasks[1], "sure: beta", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sb := envtest.NewSandbox(t, b, core.SandboxSpec{}, 5*time.Second)
			conv, obs := envtest.Episode(t, client, envplugin.Episode{ID: tc.name, Task: tc.task, Sandbox: sb}, 1,
				func(int, []core.Message) core.Message {
					return core.Message{Role: core.RoleAssistant, Content: tc.reply}
				})
			if conv[0].Content != tc.task.Prompt {
				t.Errorf("first message %q, want the prompt %q", conv[0].Content, tc.task.Prompt)
			}
			if !obs.Done || obs.Reward != tc.reward || obs.Metrics["match"] != tc.reward {
				t.Errorf("observation = %+v, want reward %v", obs, tc.reward)
			}
			// The reply really went through the sandbox.
			data, err := sb.ReadFile(context.Background(), "reply.txt", 1024)
			if err != nil || string(data) != tc.reply {
				t.Errorf("reply.txt = %q, %v; want %q", data, err, tc.reply)
			}
		})
	}
}

func TestEchoConfigErrors(t *testing.T) {
	for _, words := range [][]string{{}, {"two words"}, {""}} {
		cfg, _ := json.Marshal(map[string]any{"words": words, "path": ""})
		if diags := newEnv().Configure(context.Background(), schema.Config{Name: "echo", JSON: cfg}); !diags.HasErrors() {
			t.Errorf("words %q accepted", words)
		}
	}
}
