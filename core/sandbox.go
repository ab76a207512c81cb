package core

import (
	"context"
	"time"
)

// DefaultWorkdir is where a sandbox's writable, persistent workspace lives,
// and the working directory of an exec unless the request names another.
const DefaultWorkdir = "/workspace"

// DefaultExecTimeout is the wall-clock limit of an exec when neither the
// request nor the sandbox block's timeout names one: the block's default,
// and what ExecRequest.TimeoutOrDefault gives a backend for a request that
// names none. The host sends every request with the block's timeout, so a
// backend meets that case only from callers that bypass the host.
const DefaultExecTimeout = 30 * time.Second

// Limits bound what code in a sandbox may consume. Zero means "backend
// default"; backends document their defaults and which limits they honour.
// The JSON names, and the paths of diagnostics about a limit
// (["limits", "memory"]), are the attribute names of the HCL limits block,
// so users only ever see those; the Go fields say their unit.
type Limits struct {
	CPUTime       time.Duration `json:"cpu_time,omitempty"`  // per exec, RLIMIT_CPU-like
	MemoryBytes   int64         `json:"memory,omitempty"`    // whole sandbox
	Pids          int           `json:"pids,omitempty"`      // whole sandbox
	FileSizeBytes int64         `json:"file_size,omitempty"` // largest single file
	OpenFiles     int           `json:"open_files,omitempty"`
	TmpBytes      int64         `json:"tmp,omitempty"`    // size of /tmp
	OutputBytes   int64         `json:"output,omitempty"` // capture cap per stream per exec
	DiskBytes     int64         `json:"disk,omitempty"`   // workspace size, where supported
	CPUs          float64       `json:"cpus,omitempty"`
}

// NamedLimit is one limit under its HCL attribute name. Value is the
// limit in the unit users write it in after parsing: bytes for sizes,
// seconds for cpu_time, a count or a CPU share for the rest. 0 is unset.
type NamedLimit struct {
	Name  string
	Value float64
}

// Named lists every limit under its HCL name, in the order the docs list
// them, so a backend checks limits by the names users see and never spells
// them itself.
func (l Limits) Named() []NamedLimit {
	return []NamedLimit{
		{"memory", float64(l.MemoryBytes)}, {"cpu_time", l.CPUTime.Seconds()}, {"pids", float64(l.Pids)},
		{"file_size", float64(l.FileSizeBytes)}, {"open_files", float64(l.OpenFiles)}, {"tmp", float64(l.TmpBytes)},
		{"output", float64(l.OutputBytes)}, {"disk", float64(l.DiskBytes)}, {"cpus", l.CPUs},
	}
}

// SandboxSpec is what the host asks a backend to create. Fields a backend
// cannot honour are rejected at config time, not silently ignored.
type SandboxSpec struct {
	Image   string            `json:"image,omitempty"`  // image or snapshot (cloud backends)
	Rootfs  string            `json:"rootfs,omitempty"` // root directory (local backend)
	Env     map[string]string `json:"env,omitempty"`
	Limits  Limits            `json:"limits"`
	Labels  map[string]string `json:"labels,omitempty"`
	TTL     time.Duration     `json:"ttl,omitempty"` // dead-man's switch: backend deletes after this
	Network bool              `json:"network,omitempty"`
	Workdir string            `json:"workdir,omitempty"`
}

// SandboxInfo describes an existing sandbox, as returned by Create and List.
type SandboxInfo struct {
	ID        string            `json:"id"`
	Backend   string            `json:"backend"`
	Labels    map[string]string `json:"labels,omitempty"`
	State     string            `json:"state,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
	// Isolation names the isolation in force ("namespaces", "none", "cloud").
	Isolation string `json:"isolation,omitempty"`
}

// ExecRequest runs one command inside a sandbox.
type ExecRequest struct {
	Command []string          `json:"command"` // argv; Command[0] is looked up in PATH
	Stdin   []byte            `json:"stdin,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Dir     string            `json:"dir,omitempty"`
	Timeout time.Duration     `json:"timeout,omitempty"` // wall clock; 0 = the sandbox block's (TimeoutOrDefault)
	// MaxOutputBytes caps each of stdout and stderr; 0 = sandbox default.
	MaxOutputBytes int64 `json:"max_output_bytes,omitempty"`
}

// TimeoutOrDefault is the wall-clock limit a backend runs the request
// under: its Timeout, or DefaultExecTimeout when it names none.
func (r ExecRequest) TimeoutOrDefault() time.Duration {
	if r.Timeout <= 0 {
		return DefaultExecTimeout
	}
	return r.Timeout
}

// ExecResult reports how a command ended and which limit, if any, fired.
// Stdout and Stderr are raw bytes held in strings; they may be invalid UTF-8.
type ExecResult struct {
	ExitCode        int           `json:"exit_code"`
	Stdout          string        `json:"stdout"`
	Stderr          string        `json:"stderr"`
	TimedOut        bool          `json:"timed_out"`
	Duration        time.Duration `json:"-"`
	DurationMS      float64       `json:"duration_ms"`
	Signal          string        `json:"signal,omitempty"`
	OOMKilled       bool          `json:"oom_killed,omitempty"`
	PidsExceeded    bool          `json:"pids_exceeded,omitempty"`
	CPUTimeExceeded bool          `json:"cpu_time_exceeded,omitempty"`
	OutputTruncated bool          `json:"output_truncated,omitempty"`
	Isolation       string        `json:"isolation,omitempty"`
}

// LimitHit returns the name of the first limit that fired, or "".
func (r ExecResult) LimitHit() string {
	switch {
	case r.TimedOut:
		return "timed_out"
	case r.OOMKilled:
		return "oom_killed"
	case r.PidsExceeded:
		return "pids_exceeded"
	case r.CPUTimeExceeded:
		return "cpu_time_exceeded"
	case r.OutputTruncated:
		return "output_truncated"
	}
	return ""
}

// FileInfo is one entry of a sandbox directory listing.
type FileInfo struct {
	Path    string    `json:"path"`
	Size    int64     `json:"size"`
	Mode    uint32    `json:"mode"`
	IsDir   bool      `json:"is_dir"`
	ModTime time.Time `json:"mod_time"`
}

// SandboxOps are a backend's calls on its existing sandboxes, each named by
// id. Every sandbox backend has them (sandboxplugin.Backend embeds them);
// the host relays an environment's calls to them. They must be safe for
// concurrent use.
type SandboxOps interface {
	// Exec runs a command to completion, for at most
	// req.TimeoutOrDefault(). Limits that fire are reported in the result,
	// not as errors; errors mean the sandbox itself failed.
	Exec(ctx context.Context, id string, req ExecRequest) (ExecResult, error)

	// File access, confined to the sandbox. Relative paths are relative to
	// the workspace. maxBytes caps a read; 0 means the backend default.
	ReadFile(ctx context.Context, id, path string, maxBytes int64) ([]byte, error)
	WriteFile(ctx context.Context, id, path string, data []byte, mode uint32) error
	ListFiles(ctx context.Context, id, path string) ([]FileInfo, error)
}

// Sandbox is one sandbox bound to its id: what an environment is lent for
// an episode (envplugin.Sandbox is this type). It can reach only that
// sandbox, and never holds backend credentials.
type Sandbox interface {
	ID() string
	Exec(ctx context.Context, req ExecRequest) (ExecResult, error)
	ReadFile(ctx context.Context, path string, maxBytes int64) ([]byte, error)
	WriteFile(ctx context.Context, path string, data []byte, mode uint32) error
	ListFiles(ctx context.Context, path string) ([]FileInfo, error)
}
