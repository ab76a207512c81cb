package config

import (
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/rlhost/rlhost/core"
)

// File is a loaded job file.
type File struct {
	Path string // as given
	Dir  string // absolute directory of the file: base for relative paths

	Run       Run
	Sandboxes []*Sandbox
	Envs      []*Env
	Policies  []*Policy
	Output    Output
	Trainer   *Trainer // nil: the run only rolls out and scores

	// Files holds the parsed sources, for rendering diagnostics with context.
	Files map[string]*hcl.File
	// EvalContext is what plugin bodies are decoded with: var, env(), path, run.
	EvalContext *hcl.EvalContext
}

// Run is the run block: how many steps, how large, how parallel.
type Run struct {
	Name           string
	Steps          int
	BatchSize      int // tasks per step
	GroupSize      int // episodes per task
	Seed           int64
	Concurrency    int // episodes in flight at once
	MaxTurns       int
	EpisodeTimeout time.Duration
	// MaxOffPolicySteps bounds how far rollouts run ahead of training
	// (max_off_policy_steps); nil leaves it to the policy provider's
	// default (host/training).
	MaxOffPolicySteps *int
	Env               string // env block used; defaults to the only one
	Policy            string // policy block used; defaults to the only one
	DefRange          hcl.Range
	AttrRanges        map[string]hcl.Range
}

// Sandbox is a sandbox block. Spec holds the backend-independent settings the
// host decodes; Body holds the rest, decoded against the backend's schema.
type Sandbox struct {
	Name        string
	Backend     string        // built-in backend name
	Plugin      string        // or an external plugin (path or name)
	ExecTimeout time.Duration // the block's timeout: each exec's limit unless the env names its own
	Spec        core.SandboxSpec
	Body        hcl.Body
	DefRange    hcl.Range
	AttrRanges  map[string]hcl.Range // host-decoded attributes, for plugin diagnostics
}

// PluginRef is what to start for this block: an external plugin if given,
// else the built-in backend.
func (s *Sandbox) PluginRef() string {
	if s.Plugin != "" {
		return s.Plugin
	}
	return s.Backend
}

// Env is an env block.
type Env struct {
	Name       string
	Plugin     string
	Sandbox    string   // name of the sandbox block its episodes run in
	PassEnv    []string // host environment variables the plugin may see
	Python     string   // interpreter of a .py plugin (default python3)
	Body       hcl.Body
	DefRange   hcl.Range
	AttrRanges map[string]hcl.Range
}

// Policy is a policy block. Its body is decoded by host/policy's Config.
type Policy struct {
	Name     string
	Provider string
	Body     hcl.Body
	DefRange hcl.Range
}

// Trainer is the trainer block. Its body is decoded by host/training.
type Trainer struct {
	Body     hcl.Body
	DefRange hcl.Range
}

// Output is the output block.
type Output struct {
	Dir string // relative to the working directory, like any CLI output path
}

// Defaults applied when an attribute is absent.
const (
	DefaultSteps          = 1
	DefaultBatchSize      = 1
	DefaultGroupSize      = 1
	DefaultConcurrency    = 4
	DefaultMaxTurns       = 1
	DefaultEpisodeTimeout = 10 * time.Minute
	DefaultExecTimeout    = core.DefaultExecTimeout // the sandbox block's timeout
)
