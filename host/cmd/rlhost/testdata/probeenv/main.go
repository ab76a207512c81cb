// Command probeenv is a test and benchmark environment plugin. Each step
// runs `true` once in the lent sandbox and scores 1, which makes it the no-op
// path for measuring plugin round trips. The first time it sees
// the reply "CRASH" it records that in a marker file and SIGKILLs itself,
// mid-step, so tests can check that the host records the episode as errored,
// restarts the plugin and carries on. "PANIC" panics inside Step (the SDK
// recovers it); the first "GOPANIC" panics in a goroutine, which kills the
// process with a raw trace. The reply "exec" runs `true` and
// keeps the episode open; "noop" keeps it open without touching the sandbox
// (one host → plugin round trip, for benchmarks) and says which wire the
// step came on (info "wire": "frames" or "grpc"); any other reply runs it
// and ends the episode.
package main

import (
	"context"
	"fmt"
	"os"
	"syscall"

	"google.golang.org/grpc"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/core/sdk/envplugin"
	"github.com/rlhost/rlhost/core/sdk/pluginbase"
)

type env struct{ marker string }

func (e *env) Info() pluginbase.Info {
	return pluginbase.Info{Name: "probeenv", Version: "0.0.1", Kind: pluginbase.KindEnv,
		Config: schema.Spec{Attributes: []schema.Attribute{schema.String("marker", "").MarkRequired()}}}
}

func (e *env) Configure(_ context.Context, cfg schema.Config) schema.Diagnostics {
	var c struct {
		Marker string `json:"marker"`
	}
	if err := cfg.Decode(&c); err != nil {
		return schema.Diagnostics{schema.Errorf(nil, "bad config", "%v", err)}
	}
	e.marker = c.Marker
	return nil
}

func (e *env) Tasks(context.Context) ([]core.Task, error) {
	var ts []core.Task
	for i := 0; i < 4; i++ {
		ts = append(ts, core.Task{ID: fmt.Sprintf("t%d", i), Prompt: "say something"})
	}
	return ts, nil
}

func (e *env) NewEpisode(_ context.Context, ep envplugin.Episode) (envplugin.Session, envplugin.Observation, error) {
	return &session{e: e, sb: ep.Sandbox}, envplugin.Observation{Messages: []core.Message{{Role: core.RoleUser, Content: ep.Task.Prompt}}}, nil
}

type session struct {
	e  *env
	sb envplugin.Sandbox
}

func (s *session) Step(ctx context.Context, reply core.Message) (envplugin.Observation, error) {
	switch reply.Content {
	case "PANIC": // in the call: the SDK recovers it
		var m map[string]int
		m["step"]++
	case "GOPANIC": // in a goroutine of the plugin's own: the process dies
		if _, err := os.Stat(s.e.marker); os.IsNotExist(err) {
			_ = os.WriteFile(s.e.marker, []byte("crashed"), 0o644)
			go func() { panic("probeenv: goroutine panic") }()
			select {}
		}
	}
	if reply.Content == "CRASH" {
		if _, err := os.Stat(s.e.marker); os.IsNotExist(err) {
			_ = os.WriteFile(s.e.marker, []byte("crashed"), 0o644)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
	if reply.Content == "noop" {
		// Which wire the step came on: gRPC puts the method in the context.
		wire := "frames"
		if _, ok := grpc.Method(ctx); ok {
			wire = "grpc"
		}
		return envplugin.Observation{Info: map[string]string{"wire": wire}}, nil
	}
	res, err := s.sb.Exec(ctx, core.ExecRequest{Command: []string{"true"}})
	if err != nil {
		return envplugin.Observation{}, err
	}
	// "exec" keeps the episode open, so a benchmark can step it repeatedly.
	if reply.Content == "exec" {
		return envplugin.Observation{Metrics: map[string]float64{"exit": float64(res.ExitCode)}}, nil
	}
	return envplugin.Observation{Done: true, Reward: 1, Metrics: map[string]float64{"exit": float64(res.ExitCode)}}, nil
}

func (s *session) End(context.Context, string) (envplugin.Observation, error) {
	return envplugin.Observation{}, nil
}

func main() { envplugin.Serve(&env{}) }
