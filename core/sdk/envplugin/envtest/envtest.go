// Package envtest helps environment authors test an Environment the way the
// host runs it: over real gRPC and the episode socket, with a Sandbox lent
// on the host's socket as the host lends it, backed by a real sandbox
// backend. It is the rlhost analogue of Nomad's plugins/drivers/testutils.
package envtest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/core/sdk/envplugin"
	"github.com/rlhost/rlhost/core/sdk/pluginbase"
	"github.com/rlhost/rlhost/core/sdk/sandboxplugin"
	"github.com/rlhost/rlhost/core/sdk/wire/lend"
)

// Serve runs env behind a real in-process gRPC connection, with its
// episode socket, and returns the host-side client. Everything is torn
// down when the test ends.
func Serve(t testing.TB, env envplugin.Environment) *envplugin.Client {
	t.Helper()
	client, _ := plugin.TestPluginGRPCConn(t, false, map[string]plugin.Plugin{
		pluginbase.KindEnv: &envplugin.Plugin{Impl: env},
	})
	t.Cleanup(func() { _ = client.Close() })
	raw, err := client.Dispense(pluginbase.KindEnv)
	if err != nil {
		t.Fatalf("dispense env plugin: %v", err)
	}
	c := raw.(*envplugin.Client)
	// As the host does before it kills a plugin: live episodes end, and
	// the plugin's episode socket is removed.
	t.Cleanup(func() { shutdown(t, c) })
	return c
}

func shutdown(t testing.TB, c *envplugin.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Shutdown(ctx); err != nil {
		t.Errorf("shut down env plugin: %v", err)
	}
}

// Configure configures env the way the host configures it from an env block
// holding settings: the schema's defaults are filled in, absent settings are
// null, and values are converted to their declared types before env sees
// them. Settings that do not fit the schema (unknown, missing, mistyped)
// fail the test, as they would fail `rlhost validate`; the env's own
// diagnostics are returned for the test to check.
func Configure(t testing.TB, env envplugin.Environment, name string, settings map[string]any) schema.Diagnostics {
	t.Helper()
	raw, err := json.Marshal(settings)
	if err != nil {
		t.Fatalf("configure %s: %v", name, err)
	}
	js, err := env.Info().Config.Complete(raw)
	if err != nil {
		t.Fatalf("configure %s: %v", name, err)
	}
	return env.Configure(context.Background(), schema.Config{Name: name, JSON: js, BaseDir: t.TempDir(), RunID: "envtest"})
}

// BackendSandbox lends one sandbox of a Backend to an environment, the way
// the host does: it is the host's own lend.Bound.
type BackendSandbox = lend.Bound

var _ envplugin.Sandbox = (*BackendSandbox)(nil)

// NewSandbox creates a sandbox on b from spec and returns it lent-style; the
// sandbox is destroyed when the test ends.
func NewSandbox(t testing.TB, b sandboxplugin.Backend, spec core.SandboxSpec, timeout time.Duration) *BackendSandbox {
	t.Helper()
	ctx := context.Background()
	info, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Destroy(context.Background(), info.ID); err != nil {
			t.Errorf("destroy sandbox %s: %v", info.ID, err)
		}
	})
	return &BackendSandbox{Backend: b, SandboxID: info.ID, DefaultTimeout: timeout}
}

// Episode runs one whole episode of client on task with a scripted policy:
// reply(turn, conversation) gives the assistant message for each turn. It
// returns the conversation and the final observation. maxTurns bounds it.
func Episode(t testing.TB, client envplugin.Environment, ep envplugin.Episode, maxTurns int,
	reply func(turn int, conv []core.Message) core.Message) ([]core.Message, envplugin.Observation) {
	t.Helper()
	ctx := context.Background()
	sess, obs, err := client.NewEpisode(ctx, ep)
	if err != nil {
		t.Fatalf("new episode: %v", err)
	}
	conv := append([]core.Message(nil), obs.Messages...)
	for turn := 0; turn < maxTurns && !obs.Done; turn++ {
		msg := reply(turn, conv)
		conv = append(conv, msg)
		obs, err = sess.Step(ctx, msg)
		if err != nil {
			t.Fatalf("step %d: %v", turn, err)
		}
		conv = append(conv, obs.Messages...)
	}
	reason := ""
	if !obs.Done {
		reason = core.FinishMaxTurns
	}
	end, err := sess.End(ctx, reason)
	if err != nil {
		t.Fatalf("end episode: %v", err)
	}
	if !obs.Done {
		obs = end
	}
	return conv, obs
}
