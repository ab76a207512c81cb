package sandboxplugin_test

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/logtest"
	"github.com/rlhost/rlhost/core/sdk/pluginbase"
	"github.com/rlhost/rlhost/core/sdk/sandboxplugin"
)

// listBackend implements only Info and List (the embedded nil interface
// would panic on anything else); List panics on the label "boom".
type listBackend struct{ sandboxplugin.Backend }

func (listBackend) Info() pluginbase.Info {
	return pluginbase.Info{Name: "list", Version: "1", Kind: pluginbase.KindSandbox}
}

func (listBackend) List(_ context.Context, labels map[string]string) ([]core.SandboxInfo, error) {
	if labels["boom"] != "" {
		panic("boom: " + labels["boom"])
	}
	return []core.SandboxInfo{{ID: "sb-1", Backend: "list"}}, nil
}

func TestPanicFailsOnlyItsCall(t *testing.T) {
	logs := &logtest.Buffer{}
	client, _ := plugin.TestPluginGRPCConn(t, false, map[string]plugin.Plugin{
		pluginbase.KindSandbox: &sandboxplugin.Plugin{Impl: listBackend{}, Logger: hclog.New(&hclog.LoggerOptions{Output: logs, JSONFormat: true})},
	})
	t.Cleanup(func() { _ = client.Close() })
	raw, err := client.Dispense(pluginbase.KindSandbox)
	if err != nil {
		t.Fatal(err)
	}
	b := raw.(*sandboxplugin.Client)
	ctx := context.Background()
	_, err = b.List(ctx, map[string]string{"boom": "now"})
	if err == nil || !strings.Contains(err.Error(), "plugin panicked in rlhost.v1.SandboxBackend/List: boom: now") {
		t.Fatalf("panicking List: %v", err)
	}
	got, err := b.List(ctx, nil)
	if err != nil || len(got) != 1 || got[0].ID != "sb-1" {
		t.Fatalf("List after the panic: %v, %v", got, err)
	}
	if out := logs.String(); strings.Count(out, "\n") != 1 || !strings.Contains(out, `"stack":"goroutine `) {
		t.Errorf("want one log entry with the stack, got:\n%s", out)
	}
}
