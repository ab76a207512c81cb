package rlhostpb

// Conversions of what more than one wire carries: what every plugin kind
// shares (Describe, Configure and its diagnostics), and the calls on one
// sandbox (exec requests and results, file listings), which both the
// sandbox backend's gRPC service and the lent sandbox's frames carry. Each
// kind's own messages are converted beside the kind:
// core/sdk/envplugin/convert.go and core/sdk/sandboxplugin/convert.go.

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/core/sdk/pluginbase"
)

// FromInfo encodes a plugin description.
func FromInfo(in pluginbase.Info) (*PluginInfo, error) {
	spec, err := json.Marshal(in.Config)
	if err != nil {
		return nil, err
	}
	return &PluginInfo{Name: in.Name, Version: in.Version, Kind: in.Kind, Description: in.Description, ConfigSchemaJson: spec, NoSandbox: in.NoSandbox}, nil
}

// ToInfo decodes a plugin description.
func ToInfo(p *PluginInfo) (pluginbase.Info, error) {
	out := pluginbase.Info{Name: p.GetName(), Version: p.GetVersion(), Kind: p.GetKind(), Description: p.GetDescription(), NoSandbox: p.GetNoSandbox()}
	if len(p.GetConfigSchemaJson()) > 0 {
		if err := json.Unmarshal(p.GetConfigSchemaJson(), &out.Config); err != nil {
			return out, err
		}
	}
	return out, nil
}

// FromConfig encodes a decoded plugin config.
func FromConfig(c schema.Config) *ConfigureRequest {
	return &ConfigureRequest{Name: c.Name, ConfigJson: c.JSON, BaseDir: c.BaseDir, RunId: c.RunID}
}

// ToConfig decodes a plugin config.
func ToConfig(r *ConfigureRequest) schema.Config {
	return schema.Config{Name: r.GetName(), JSON: r.GetConfigJson(), BaseDir: r.GetBaseDir(), RunID: r.GetRunId()}
}

// FromDiagnostics encodes diagnostics.
func FromDiagnostics(ds schema.Diagnostics) *ConfigureResponse {
	out := &ConfigureResponse{}
	for _, d := range ds {
		out.Diagnostics = append(out.Diagnostics, &Diagnostic{Severity: int32(d.Severity), Summary: d.Summary, Detail: d.Detail, Path: d.Path})
	}
	return out
}

// ToDiagnostics decodes diagnostics.
func ToDiagnostics(r *ConfigureResponse) schema.Diagnostics {
	var out schema.Diagnostics
	for _, d := range r.GetDiagnostics() {
		out = append(out, schema.Diagnostic{Severity: schema.Severity(d.GetSeverity()), Summary: d.GetSummary(), Detail: d.GetDetail(), Path: d.GetPath()})
	}
	return out
}

// ValidUTF8 replaces invalid UTF-8 with U+FFFD: proto3 strings must be
// UTF-8, and text from sandboxes need not be.
func ValidUTF8(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// ValidUTF8Map is ValidUTF8 over keys and values.
func ValidUTF8Map(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[ValidUTF8(k)] = ValidUTF8(v)
	}
	return out
}

// ValidUTF8Keys is ValidUTF8 over keys.
func ValidUTF8Keys(m map[string]float64) map[string]float64 {
	if m == nil {
		return nil
	}
	out := make(map[string]float64, len(m))
	for k, v := range m {
		out[ValidUTF8(k)] = v
	}
	return out
}

// FromExecRequest encodes an exec request. Argv, env values and the
// directory travel as bytes, exactly; env names must be UTF-8 (map keys).
func FromExecRequest(id string, r core.ExecRequest) *ExecRequest {
	out := &ExecRequest{SandboxId: ValidUTF8(id), Stdin: r.Stdin, Dir: []byte(r.Dir), TimeoutMs: r.Timeout.Milliseconds(), MaxOutputBytes: r.MaxOutputBytes}
	for _, a := range r.Command {
		out.Command = append(out.Command, []byte(a))
	}
	if r.Env != nil {
		out.Env = make(map[string][]byte, len(r.Env))
		for k, v := range r.Env {
			out.Env[ValidUTF8(k)] = []byte(v)
		}
	}
	return out
}

// ToExecRequest decodes an exec request.
func ToExecRequest(r *ExecRequest) core.ExecRequest {
	out := core.ExecRequest{Stdin: r.GetStdin(), Dir: string(r.GetDir()), Timeout: time.Duration(r.GetTimeoutMs()) * time.Millisecond, MaxOutputBytes: r.GetMaxOutputBytes()}
	for _, a := range r.GetCommand() {
		out.Command = append(out.Command, string(a))
	}
	if r.GetEnv() != nil {
		out.Env = make(map[string]string, len(r.GetEnv()))
		for k, v := range r.GetEnv() {
			out.Env[k] = string(v)
		}
	}
	return out
}

// FromExecResult encodes an exec result.
func FromExecResult(r core.ExecResult) *ExecResult {
	return &ExecResult{
		ExitCode: int64(r.ExitCode), Stdout: []byte(r.Stdout), Stderr: []byte(r.Stderr), TimedOut: r.TimedOut,
		DurationUs: r.Duration.Microseconds(), Signal: r.Signal, OomKilled: r.OOMKilled, PidsExceeded: r.PidsExceeded,
		CpuTimeExceeded: r.CPUTimeExceeded, OutputTruncated: r.OutputTruncated, Isolation: r.Isolation,
	}
}

// ToExecResult decodes an exec result.
func ToExecResult(r *ExecResult) core.ExecResult {
	d := time.Duration(r.GetDurationUs()) * time.Microsecond
	return core.ExecResult{
		ExitCode: int(r.GetExitCode()), Stdout: string(r.GetStdout()), Stderr: string(r.GetStderr()), TimedOut: r.GetTimedOut(),
		Duration: d, DurationMS: float64(d.Microseconds()) / 1000, Signal: r.GetSignal(), OOMKilled: r.GetOomKilled(),
		PidsExceeded: r.GetPidsExceeded(), CPUTimeExceeded: r.GetCpuTimeExceeded(), OutputTruncated: r.GetOutputTruncated(),
		Isolation: r.GetIsolation(),
	}
}

// FromFiles encodes a directory listing.
func FromFiles(fs []core.FileInfo) *ListFilesResponse {
	out := &ListFilesResponse{}
	for _, f := range fs {
		out.Files = append(out.Files, &FileInfo{Path: []byte(f.Path), Size: f.Size, Mode: f.Mode, IsDir: f.IsDir, ModTimeUnixMs: f.ModTime.UnixMilli()})
	}
	return out
}

// ToFiles decodes a directory listing.
func ToFiles(r *ListFilesResponse) []core.FileInfo {
	var out []core.FileInfo
	for _, f := range r.GetFiles() {
		out = append(out, core.FileInfo{Path: string(f.GetPath()), Size: f.GetSize(), Mode: f.GetMode(), IsDir: f.GetIsDir(), ModTime: time.UnixMilli(f.GetModTimeUnixMs()).UTC()})
	}
	return out
}
