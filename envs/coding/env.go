package coding

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/core/sdk/envplugin"
	"github.com/rlhost/rlhost/core/sdk/pluginbase"
)

// Version of the coding environment.
const Version = "0.1.0"

// Env is the coding environment. The zero value is not configured; use New.
type Env struct {
	mu       sync.RWMutex
	settings settings
	tasks    []taskConfig
	byID     map[string]taskConfig

	refs   refCache
	runner runnerCode
}

var _ envplugin.Environment = (*Env)(nil)

// New returns an unconfigured coding environment.
func New() *Env { return &Env{} }

// Info describes the plugin and its config schema.
func (e *Env) Info() pluginbase.Info {
	return pluginbase.Info{
		Name:        "coding",
		Version:     Version,
		Kind:        pluginbase.KindEnv,
		Description: "single-shot Python function writing, scored by tests in the sandbox",
		Config:      configSpec(),
	}
}

// Configure validates the block and loads the tasks.
func (e *Env) Configure(_ context.Context, cfg schema.Config) schema.Diagnostics {
	var c config
	if err := cfg.Decode(&c); err != nil {
		return schema.Diagnostics{schema.Errorf(nil, "invalid coding config", "%v", err)}
	}
	s, diags := c.validate()
	tasks, d := loadTasks(cfg, c, s.reward)
	diags = append(diags, d...)
	if diags.HasErrors() {
		return diags
	}
	byID := make(map[string]taskConfig, len(tasks))
	for _, t := range tasks {
		byID[t.ID] = t
	}
	e.mu.Lock()
	e.settings, e.tasks, e.byID = s, tasks, byID
	e.mu.Unlock()
	return diags
}

// loadTasks gathers the tasks named by `tasks` and the `task` blocks.
func loadTasks(cfg schema.Config, c config, reward string) ([]taskConfig, schema.Diagnostics) {
	var tasks []taskConfig
	var diags schema.Diagnostics
	switch {
	case c.Tasks == "builtin" || (c.Tasks == "" && len(c.Task) == 0):
		tasks = builtinTasks()
	case c.Tasks != "":
		path := cfg.Path(c.Tasks)
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, schema.Diagnostics{schema.Errorf([]string{"tasks"}, "cannot read tasks", "%v", err)}
		}
		fromFile, err := parseTasks(bytes.NewReader(data))
		if err != nil {
			return nil, schema.Diagnostics{schema.Errorf([]string{"tasks"}, "invalid tasks file", "%s: %v", path, err)}
		}
		for i, t := range fromFile {
			if err := t.check(reward); err != nil {
				diags = append(diags, schema.Errorf([]string{"tasks"}, "invalid task",
					"%s: task %d (%q): %v", path, i, t.ID, err))
			}
		}
		tasks = fromFile
	}
	for i, t := range c.Task {
		// The path picks the i-th task block, so the host points at it.
		if err := t.check(reward); err != nil {
			diags = append(diags, schema.Errorf([]string{"task", strconv.Itoa(i)}, "invalid task block",
				"task block %d (%q): %v", i, t.ID, err))
		}
		tasks = append(tasks, t)
	}
	seen := map[string]bool{}
	for _, t := range tasks {
		if seen[t.ID] {
			diags = append(diags, schema.Errorf([]string{"task"}, "duplicate task id", "%q appears twice", t.ID))
		}
		seen[t.ID] = true
	}
	if len(tasks) == 0 && !diags.HasErrors() {
		diags = append(diags, schema.Errorf([]string{"tasks"}, "no tasks", "the tasks file has no tasks"))
	}
	return tasks, diags
}

// Tasks lists the configured tasks in config order. An episode names its
// task by id, which NewEpisode looks up among the tasks Configure loaded
// (as the mbpp env does), so nothing is encoded into Data and parsed back.
func (e *Env) Tasks(context.Context) ([]core.Task, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	out := make([]core.Task, 0, len(e.tasks))
	for _, t := range e.tasks {
		out = append(out, core.Task{ID: t.ID, Prompt: t.Prompt})
	}
	return out, nil
}

// NewEpisode poses the task: an optional system message and the prompt.
func (e *Env) NewEpisode(_ context.Context, ep envplugin.Episode) (envplugin.Session, envplugin.Observation, error) {
	e.mu.RLock()
	s := e.settings
	configured := e.byID != nil
	t, ok := e.byID[ep.Task.ID]
	e.mu.RUnlock()
	if !configured {
		return nil, envplugin.Observation{}, errors.New("coding env: not configured")
	}
	if !ok {
		return nil, envplugin.Observation{}, fmt.Errorf("episode %s: task %q: %w", ep.ID, ep.Task.ID, core.ErrNotFound)
	}
	if ep.Sandbox == nil {
		return nil, envplugin.Observation{}, fmt.Errorf("episode %s: the coding env needs a sandbox", ep.ID)
	}
	var msgs []core.Message
	if s.systemPrompt != "" {
		msgs = append(msgs, core.Message{Role: core.RoleSystem, Content: s.systemPrompt})
	}
	msgs = append(msgs, core.Message{Role: core.RoleUser, Content: t.Prompt})
	sess := &session{env: e, settings: s, task: t, sandbox: ep.Sandbox}
	return sess, envplugin.Observation{Messages: msgs}, nil
}

// session is one single-turn episode.
type session struct {
	env      *Env
	settings settings
	task     taskConfig
	sandbox  envplugin.Sandbox

	mu     sync.Mutex
	scored bool
}

// Step scores the reply and ends the episode.
func (s *session) Step(ctx context.Context, reply core.Message) (envplugin.Observation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.scored {
		return envplugin.Observation{}, errors.New("coding env: episode already scored; it takes one reply")
	}
	s.scored = true
	o, err := s.env.score(ctx, s.settings, s.sandbox, s.task, reply.Content)
	if err != nil {
		return envplugin.Observation{}, fmt.Errorf("score task %s: %w", s.task.ID, err)
	}
	return envplugin.Observation{
		Done: true, Reward: o.reward, Metrics: o.metrics, Info: o.info, FinishReason: o.finish,
	}, nil
}

// End closes the episode. A reply that was never scored gets reward 0 with
// `unscored` set: the model did nothing wrong that the env could see.
func (s *session) End(_ context.Context, reason string) (envplugin.Observation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.scored {
		return envplugin.Observation{}, nil
	}
	s.scored = true
	return envplugin.Observation{
		Done: true, Metrics: map[string]float64{"unscored": 1},
		Info: map[string]string{"error": "episode ended before a reply: " + strconv.Quote(reason)}, FinishReason: reason,
	}, nil
}
