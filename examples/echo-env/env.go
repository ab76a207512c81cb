package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/core/sdk/envplugin"
	"github.com/rlhost/rlhost/core/sdk/pluginbase"
)

// echoEnv poses one task per configured word.
type echoEnv struct {
	mu    sync.RWMutex
	words []string
	path  string
}

var _ envplugin.Environment = (*echoEnv)(nil)

func newEnv() *echoEnv { return &echoEnv{} }

type config struct {
	Words []string `json:"words"`
	Path  string   `json:"path"`
}

func (e *echoEnv) Info() pluginbase.Info {
	return pluginbase.Info{
		Name: "echo", Version: "0.1.0", Kind: pluginbase.KindEnv,
		Description: "repeat a word; scored with cat in the sandbox",
		Config: schema.Spec{Attributes: []schema.Attribute{
			schema.StringList("words", "one task per word").WithDefault([]string{"hello", "sandbox", "plugin"}),
			schema.String("path", "PATH for commands run in the sandbox").WithDefault("/usr/local/bin:/usr/bin:/bin"),
		}},
	}
}

func (e *echoEnv) Configure(_ context.Context, cfg schema.Config) schema.Diagnostics {
	var c config
	if err := cfg.Decode(&c); err != nil {
		return schema.Diagnostics{schema.Errorf(nil, "invalid echo config", "%v", err)}
	}
	if len(c.Words) == 0 {
		return schema.Diagnostics{schema.Errorf([]string{"words"}, "no words", "give at least one word")}
	}
	for i, w := range c.Words {
		if w == "" || strings.ContainsAny(w, " \t\r\n") {
			return schema.Diagnostics{schema.Errorf([]string{"words"}, "invalid word", "words[%d] = %q: want one word without spaces", i, w)}
		}
	}
	if c.Path == "" {
		return schema.Diagnostics{schema.Errorf([]string{"path"}, "empty path", "commands in the sandbox need a PATH")}
	}
	e.mu.Lock()
	e.words, e.path = c.Words, c.Path
	e.mu.Unlock()
	return nil
}

// taskData is what Tasks puts in core.Task.Data.
type taskData struct {
	Word string `json:"word"`
}

func (e *echoEnv) Tasks(context.Context) ([]core.Task, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	var out []core.Task
	for i, w := range e.words {
		data, err := json.Marshal(taskData{Word: w})
		if err != nil {
			return nil, fmt.Errorf("encode task %d: %w", i, err)
		}
		out = append(out, core.Task{ID: fmt.Sprintf("echo-%d", i), Prompt: prompt(w), Data: data})
	}
	return out, nil
}

func prompt(word string) string {
	return "Reply with exactly this word and nothing else: " + word
}

func (e *echoEnv) NewEpisode(_ context.Context, ep envplugin.Episode) (envplugin.Session, envplugin.Observation, error) {
	var d taskData
	if err := json.Unmarshal(ep.Task.Data, &d); err != nil || d.Word == "" {
		return nil, envplugin.Observation{}, fmt.Errorf("episode %s: task %q has no word", ep.ID, ep.Task.ID)
	}
	if ep.Sandbox == nil {
		return nil, envplugin.Observation{}, errors.New("the echo env needs a sandbox")
	}
	e.mu.RLock()
	path := e.path
	e.mu.RUnlock()
	s := &session{word: d.Word, sandbox: ep.Sandbox, path: path}
	return s, envplugin.Observation{Messages: []core.Message{{Role: core.RoleUser, Content: prompt(d.Word)}}}, nil
}

type session struct {
	word    string
	path    string
	sandbox envplugin.Sandbox
}

// Step writes the reply into the sandbox and reads it back with cat, so the
// score comes from what the sandbox saw.
func (s *session) Step(ctx context.Context, reply core.Message) (envplugin.Observation, error) {
	if err := s.sandbox.WriteFile(ctx, "reply.txt", []byte(reply.Content), 0o644); err != nil {
		return envplugin.Observation{}, fmt.Errorf("write reply: %w", err)
	}
	res, err := s.sandbox.Exec(ctx, core.ExecRequest{
		Command: []string{"cat", "reply.txt"},
		Env:     map[string]string{"PATH": s.path},
	})
	if err != nil {
		return envplugin.Observation{}, fmt.Errorf("cat reply: %w", err)
	}
	if res.ExitCode != 0 {
		return envplugin.Observation{}, fmt.Errorf("cat reply: exit %d: %s", res.ExitCode, res.Stderr)
	}
	obs := envplugin.Observation{Done: true, FinishReason: core.FinishDone, Metrics: map[string]float64{"match": 0}}
	if strings.TrimSpace(res.Stdout) == s.word {
		obs.Reward, obs.Metrics["match"], obs.FinishReason = 1, 1, core.FinishPassed
	}
	return obs, nil
}

func (s *session) End(context.Context, string) (envplugin.Observation, error) {
	return envplugin.Observation{}, nil
}
