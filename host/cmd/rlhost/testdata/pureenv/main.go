// Command pureenv is a test environment that runs no commands: it declares
// NoSandbox and scores a reply by whether it repeats the task's word, so a
// job for it needs no sandbox block and starts no backend.
package main

import (
	"context"
	"strings"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/core/sdk/envplugin"
	"github.com/rlhost/rlhost/core/sdk/pluginbase"
)

type env struct{}

func (env) Info() pluginbase.Info {
	return pluginbase.Info{Name: "pureenv", Version: "0.0.1", Kind: pluginbase.KindEnv, NoSandbox: true}
}

func (env) Configure(context.Context, schema.Config) schema.Diagnostics { return nil }

func (env) Tasks(context.Context) ([]core.Task, error) {
	return []core.Task{{ID: "alpha", Prompt: "say alpha"}, {ID: "beta", Prompt: "say beta"}}, nil
}

func (env) NewEpisode(_ context.Context, ep envplugin.Episode) (envplugin.Session, envplugin.Observation, error) {
	if ep.Sandbox != nil {
		return nil, envplugin.Observation{}, context.Canceled
	}
	return session{word: ep.Task.ID}, envplugin.Observation{Messages: []core.Message{{Role: core.RoleUser, Content: "say " + ep.Task.ID}}}, nil
}

type session struct{ word string }

func (s session) Step(_ context.Context, reply core.Message) (envplugin.Observation, error) {
	r := 0.0
	if strings.TrimSpace(reply.Content) == s.word {
		r = 1
	}
	return envplugin.Observation{Done: true, Reward: r}, nil
}

func (session) End(context.Context, string) (envplugin.Observation, error) {
	return envplugin.Observation{}, nil
}

func main() { envplugin.Serve(env{}) }
