package mbpp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/core/sdk/envplugin"
	"github.com/rlhost/rlhost/core/sdk/pluginbase"
)

// Version of the plugin.
const Version = "0.1.0"

// Env is the MBPP environment. Configure it once; then it is read-only and
// safe for concurrent episodes.
type Env struct {
	mu       sync.RWMutex
	cfg      *config
	problems []Problem
	byID     map[string]int
}

var _ envplugin.Environment = (*Env)(nil)

// New returns an unconfigured MBPP environment.
func New() *Env { return &Env{} }

// Info describes the plugin and its config schema.
func (e *Env) Info() pluginbase.Info {
	return pluginbase.Info{
		Name: "mbpp", Version: Version, Kind: pluginbase.KindEnv,
		Description: "MBPP Python problems solved with bash/read_file/write_file tools over several attempts; binary reward from hidden tests",
		Config:      spec(),
	}
}

// Configure decodes and validates the block and loads the dataset.
func (e *Env) Configure(_ context.Context, sc schema.Config) schema.Diagnostics {
	c := defaultConfig()
	if err := sc.Decode(&c); err != nil {
		return schema.Diagnostics{{Severity: schema.Error, Summary: "invalid mbpp config", Detail: err.Error()}}
	}
	if ds := c.check(); ds.HasErrors() {
		return ds
	}
	ps, err := LoadDataset(DatasetOptions{
		Path: sc.Path(c.Dataset), Format: c.Format, Split: c.Split,
		Limit: c.Limit, Shuffle: c.Shuffle, Seed: c.Seed,
	})
	if err != nil {
		return schema.Diagnostics{schema.Errorf([]string{"dataset"}, "cannot load dataset", "%v", err)}
	}
	byID := make(map[string]int, len(ps))
	for i, p := range ps {
		byID[taskID(p)] = i
	}
	e.mu.Lock()
	e.cfg, e.problems, e.byID = &c, ps, byID
	e.mu.Unlock()
	return nil
}

func taskID(p Problem) string { return strconv.Itoa(p.TaskID) }

func (e *Env) state() (*config, []Problem, map[string]int, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.cfg == nil {
		return nil, nil, nil, errors.New("mbpp: not configured")
	}
	return e.cfg, e.problems, e.byID, nil
}

// Tasks lists the configured problems. Prompt is the task text; the hidden
// tests stay inside the env.
func (e *Env) Tasks(context.Context) ([]core.Task, error) {
	_, ps, _, err := e.state()
	if err != nil {
		return nil, err
	}
	out := make([]core.Task, len(ps))
	for i, p := range ps {
		out[i] = core.Task{ID: taskID(p), Prompt: p.Text}
	}
	return out, nil
}

// NewEpisode resolves the interpreter and workspace in the lent sandbox
// (before the agent can touch it) and returns the prompt and tools.
func (e *Env) NewEpisode(ctx context.Context, ep envplugin.Episode) (envplugin.Session, envplugin.Observation, error) {
	cfg, ps, byID, err := e.state()
	if err != nil {
		return nil, envplugin.Observation{}, err
	}
	i, ok := byID[ep.Task.ID]
	if !ok {
		return nil, envplugin.Observation{}, fmt.Errorf("mbpp: task %q: %w", ep.Task.ID, core.ErrNotFound)
	}
	if ep.Sandbox == nil {
		return nil, envplugin.Observation{}, fmt.Errorf("mbpp: episode %s has no sandbox; the mbpp env needs one", ep.ID)
	}
	rt, err := probe(ctx, ep.Sandbox, cfg)
	if err != nil {
		return nil, envplugin.Observation{}, err
	}
	for _, name := range slices.Sorted(maps.Keys(ps[i].Files)) {
		if err := ep.Sandbox.WriteFile(ctx, path.Clean(name), []byte(ps[i].Files[name]), 0o644); err != nil {
			return nil, envplugin.Observation{}, fmt.Errorf("mbpp: task %s: write %s into sandbox %s: %w", ep.Task.ID, name, ep.Sandbox.ID(), err)
		}
	}
	s := &session{cfg: cfg, prob: ps[i], sb: ep.Sandbox, rt: rt, tools: toolRunner{cfg: cfg, sb: ep.Sandbox}, attempt: 1}
	return s, envplugin.Observation{
		Messages: []core.Message{
			{Role: core.RoleSystem, Content: systemPrompt(cfg)},
			{Role: core.RoleUser, Content: userPrompt(cfg, ps[i])},
		},
		Tools: ToolSpecs(cfg.Tools),
		Info:  map[string]string{"task_id": ep.Task.ID, "solution_path": cfg.SolutionPath},
	}, nil
}

// probe finds the interpreter's absolute path and the workspace's real path
// with a fixed PATH, so later PATH tricks in the sandbox do not matter.
func probe(ctx context.Context, sb envplugin.Sandbox, cfg *config) (runtimeInfo, error) {
	res, err := sb.Exec(ctx, core.ExecRequest{
		Command: []string{"/bin/sh", "-c", `command -v "$1" && pwd -P`, "sh", cfg.Python},
		Env:     map[string]string{"PATH": safePath, "LANG": "C.UTF-8"},
		Timeout: cfg.testTimeout,
	})
	if err != nil {
		return runtimeInfo{}, fmt.Errorf("mbpp: probe sandbox %s: %w", sb.ID(), err)
	}
	lines, err := probeLines(sb.ID(), res, cfg)
	if err != nil {
		return runtimeInfo{}, err
	}
	rel, err := cfg.workspaceRel(cfg.SolutionPath) // validated by Configure
	if err != nil {
		return runtimeInfo{}, fmt.Errorf("mbpp: solution_path: %w", err)
	}
	return runtimeInfo{python: lines[0], workdir: lines[1], solution: path.Join(lines[1], rel), isolation: res.Isolation}, nil
}

// probeLines checks the probe's answer: the interpreter's path, then the
// workspace's.
func probeLines(id string, res core.ExecResult, cfg *config) ([]string, error) {
	if res.TimedOut || res.Signal != "" || res.ExitCode == 137 {
		// Killed before it answered: a sandbox too slow or too loaded,
		// not a missing interpreter.
		return nil, fmt.Errorf("mbpp: sandbox %s did not finish looking for %q within test_timeout (%s): exit %d%s; the sandbox or its service is overloaded, or test_timeout is too short for it",
			id, cfg.Python, cfg.testTimeout, res.ExitCode, signalSuffix(res.Signal))
	}
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	if res.ExitCode != 0 || len(lines) != 2 || !path.IsAbs(lines[0]) || !path.IsAbs(lines[1]) {
		return nil, fmt.Errorf("mbpp: sandbox %s has no usable %q in %s (exit %d): %s",
			id, cfg.Python, safePath, res.ExitCode, strings.TrimSpace(res.Stdout+" "+res.Stderr))
	}
	return lines, nil
}

func signalSuffix(sig string) string {
	if sig == "" {
		return ""
	}
	return ", signal " + sig
}

func systemPrompt(cfg *config) string {
	tmpl := cfg.SystemPrompt
	if tmpl == "" {
		tmpl = defaultSystemPrompt
	}
	return strings.NewReplacer(
		"{solution_path}", cfg.SolutionPath,
		"{max_attempts}", strconv.Itoa(cfg.MaxAttempts),
		"{tools}", strings.Join(cfg.Tools, ", "),
		"{workspace}", cfg.Workspace,
	).Replace(tmpl)
}

const defaultSystemPrompt = `You are an expert Python programmer working in a Linux sandbox.

Tools: {tools}.
- bash runs one command in a fresh shell in {workspace} and returns its exit code, stdout and stderr.
- read_file and write_file read and write files in {workspace}.
Files you create stay in the sandbox for the whole episode.

Write your solution to {solution_path}. It is imported as a module and must
define the functions the tests call; do not read input or run long code at
import time. When you are done, reply without calling a tool: your solution is
then run against hidden tests. If a test fails you see the failure and can fix
your code; you have {max_attempts} attempt(s) in total.`

func userPrompt(cfg *config, p Problem) string {
	var b strings.Builder
	b.WriteString(p.Text)
	if cfg.ShowTests {
		b.WriteString("\n\nYour code should pass these tests:\n\n")
		if setup := strings.TrimSpace(p.TestSetupCode); setup != "" {
			b.WriteString(setup)
			b.WriteString("\n")
		}
		for _, t := range p.TestList {
			b.WriteString(t)
			b.WriteString("\n")
		}
	}
	return strings.TrimRight(b.String(), "\n")
}
