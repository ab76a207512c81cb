package envplugin_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/logtest"
	"github.com/rlhost/rlhost/core/sdk/envplugin"
	"github.com/rlhost/rlhost/core/sdk/envplugin/envtest"
	"github.com/rlhost/rlhost/core/sdk/pluginbase"
)

// panicSession panics in Step when the reply says "boom".
type panicEnv struct{ shellEnv }

func (e *panicEnv) NewEpisode(ctx context.Context, ep envplugin.Episode) (envplugin.Session, envplugin.Observation, error) {
	return &panicSession{}, envplugin.Observation{Messages: []core.Message{{Role: core.RoleUser, Content: ep.Task.ID}}}, nil
}

type panicSession struct{}

func (s *panicSession) Step(_ context.Context, reply core.Message) (envplugin.Observation, error) {
	if reply.Content == "boom" {
		var m map[string]int
		m["x"]++ // a nil-map write: a real runtime panic
	}
	return envplugin.Observation{Done: true, Reward: 1, FinishReason: core.FinishPassed}, nil
}

func (s *panicSession) End(context.Context, string) (envplugin.Observation, error) {
	return envplugin.Observation{}, nil
}

// A panic in one episode's Step fails that episode only: episodes in
// flight beside it finish, the stack is logged once, and the plugin keeps
// serving new episodes.
func TestPanicFailsOnlyItsEpisode(t *testing.T) {
	logs := &logtest.Buffer{}
	logger := hclog.New(&hclog.LoggerOptions{Output: logs, JSONFormat: true})
	client, _ := plugin.TestPluginGRPCConn(t, false, map[string]plugin.Plugin{
		pluginbase.KindEnv: &envplugin.Plugin{Impl: &panicEnv{}, Logger: logger},
	})
	t.Cleanup(func() { _ = client.Close() })
	raw, err := client.Dispense(pluginbase.KindEnv)
	if err != nil {
		t.Fatal(err)
	}
	env := raw.(*envplugin.Client)
	ctx := context.Background()
	t.Cleanup(func() { _ = env.Shutdown(ctx) }) // removes the episode socket

	start := func(id string) envplugin.Session {
		s, _, err := env.NewEpisode(ctx, envplugin.Episode{ID: id, Task: core.Task{ID: "t"}})
		if err != nil {
			t.Fatalf("start %s: %v", id, err)
		}
		return s
	}
	bad, good := start("bad"), start("good")
	_, err = bad.Step(ctx, core.Message{Role: core.RoleAssistant, Content: "boom"})
	if err == nil || !strings.Contains(err.Error(), "plugin panicked in rlhost.v1.Environment/Step") || !strings.Contains(err.Error(), "assignment to entry in nil map") {
		t.Fatalf("panicking step: %v", err)
	}
	if _, err := bad.End(ctx, core.FinishError); err != nil {
		t.Errorf("end after the panic: %v", err)
	}
	obs, err := good.Step(ctx, core.Message{Role: core.RoleAssistant, Content: "ok"})
	if err != nil || !obs.Done || obs.Reward != 1 {
		t.Fatalf("the episode beside the panic: %+v, %v", obs, err)
	}
	if _, err := good.End(ctx, ""); err != nil {
		t.Fatal(err)
	}
	later := start("later")
	if obs, err := later.Step(ctx, core.Message{Role: core.RoleAssistant, Content: "ok"}); err != nil || !obs.Done {
		t.Fatalf("an episode after the panic: %+v, %v", obs, err)
	}

	out := logs.String()
	if n := strings.Count(out, "\n"); n != 1 || !strings.Contains(out, `"stack":"goroutine `) || !strings.Contains(out, "panicSession).Step") {
		t.Errorf("want the stack logged as one entry naming the panicking function; got %d lines:\n%s", n, out)
	}
}

// noSandboxEnv declares that it runs no commands.
type noSandboxEnv struct{ panicEnv }

func (noSandboxEnv) Info() pluginbase.Info {
	return pluginbase.Info{Name: "pure", Version: "1", Kind: pluginbase.KindEnv, NoSandbox: true}
}

func (noSandboxEnv) NewEpisode(_ context.Context, ep envplugin.Episode) (envplugin.Session, envplugin.Observation, error) {
	if ep.Sandbox != nil {
		return nil, envplugin.Observation{}, errors.New("lent a sandbox it does not use")
	}
	return &panicSession{}, envplugin.Observation{Messages: []core.Message{{Role: core.RoleUser, Content: "hi"}}}, nil
}

// An env that needs no sandbox says so in its Info, and runs episodes with
// none lent.
func TestNoSandboxEnv(t *testing.T) {
	client := envtest.Serve(t, &noSandboxEnv{})
	if !client.Info().NoSandbox {
		t.Fatalf("Info().NoSandbox did not cross the wire: %+v", client.Info())
	}
	_, obs := envtest.Episode(t, client, envplugin.Episode{ID: "e", Task: core.Task{ID: "t"}}, 1,
		func(int, []core.Message) core.Message { return core.Message{Role: core.RoleAssistant, Content: "ok"} })
	if !obs.Done || obs.Reward != 1 {
		t.Fatalf("episode without a sandbox: %+v", obs)
	}
}
