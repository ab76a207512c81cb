package rlhostpb

// Conversions between core types and wire messages, kept beside the
// generated code so both sides of every plugin kind share one mapping.

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/pluginbase"
	"github.com/rlhost/rlhost/core/schema"
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

// FromMessage encodes a chat message. Chat text is destined for a model
// and proto3 strings must be UTF-8, so invalid bytes (raw program output an
// environment forwarded) become U+FFFD here instead of failing the call.
func FromMessage(m core.Message) *ChatMessage {
	out := &ChatMessage{Role: utf8(string(m.Role)), Content: utf8(m.Content), Name: utf8(m.Name), ToolCallId: utf8(m.ToolCallID)}
	for _, tc := range m.ToolCalls {
		out.ToolCalls = append(out.ToolCalls, &ToolCall{Id: utf8(tc.ID), Type: utf8(tc.Type), Function: &FunctionCall{Name: utf8(tc.Function.Name), Arguments: utf8(tc.Function.Arguments)}})
	}
	return out
}

func utf8(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

func utf8Map(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[utf8(k)] = utf8(v)
	}
	return out
}

func utf8Keys(m map[string]float64) map[string]float64 {
	if m == nil {
		return nil
	}
	out := make(map[string]float64, len(m))
	for k, v := range m {
		out[utf8(k)] = v
	}
	return out
}

// ToMessage decodes a chat message.
func ToMessage(m *ChatMessage) core.Message {
	out := core.Message{Role: core.Role(m.GetRole()), Content: m.GetContent(), Name: m.GetName(), ToolCallID: m.GetToolCallId()}
	for _, tc := range m.GetToolCalls() {
		out.ToolCalls = append(out.ToolCalls, core.ToolCall{ID: tc.GetId(), Type: tc.GetType(), Function: core.FunctionCall{Name: tc.GetFunction().GetName(), Arguments: tc.GetFunction().GetArguments()}})
	}
	return out
}

// FromMessages encodes a list of messages.
func FromMessages(ms []core.Message) []*ChatMessage {
	out := make([]*ChatMessage, 0, len(ms))
	for _, m := range ms {
		out = append(out, FromMessage(m))
	}
	return out
}

// ToMessages decodes a list of messages.
func ToMessages(ms []*ChatMessage) []core.Message {
	if len(ms) == 0 {
		return nil
	}
	out := make([]core.Message, 0, len(ms))
	for _, m := range ms {
		out = append(out, ToMessage(m))
	}
	return out
}

// FromTools encodes tool specs.
func FromTools(ts []core.ToolSpec) []*ToolSpec {
	var out []*ToolSpec
	for _, t := range ts {
		out = append(out, &ToolSpec{Type: utf8(t.Type), Name: utf8(t.Function.Name), Description: utf8(t.Function.Description), ParametersJson: t.Function.Parameters})
	}
	return out
}

// ToTools decodes tool specs.
func ToTools(ts []*ToolSpec) []core.ToolSpec {
	var out []core.ToolSpec
	for _, t := range ts {
		out = append(out, core.ToolSpec{Type: t.GetType(), Function: core.FunctionSpec{Name: t.GetName(), Description: t.GetDescription(), Parameters: t.GetParametersJson()}})
	}
	return out
}

// FromTask encodes a task.
func FromTask(t core.Task) *Task {
	return &Task{Id: utf8(t.ID), Prompt: utf8(t.Prompt), DataJson: t.Data}
}

// ToTask decodes a task.
func ToTask(t *Task) core.Task {
	return core.Task{ID: t.GetId(), Prompt: t.GetPrompt(), Data: t.GetDataJson()}
}

// FromObservation encodes an observation.
func FromObservation(o ObservationFields) *Observation {
	return &Observation{
		Messages: FromMessages(o.Messages), Tools: FromTools(o.Tools), Done: o.Done, Reward: o.Reward,
		Metrics: utf8Keys(o.Metrics), Info: utf8Map(o.Info), FinishReason: utf8(o.FinishReason),
	}
}

// ObservationFields mirrors envplugin.Observation without importing it, so
// the SDK package can depend on this one and not the other way round.
type ObservationFields struct {
	Messages     []core.Message
	Tools        []core.ToolSpec
	Done         bool
	Reward       float64
	Metrics      map[string]float64
	Info         map[string]string
	FinishReason string
}

// ToObservation decodes an observation.
func ToObservation(o *Observation) ObservationFields {
	return ObservationFields{
		Messages: ToMessages(o.GetMessages()), Tools: ToTools(o.GetTools()), Done: o.GetDone(), Reward: o.GetReward(),
		Metrics: o.GetMetrics(), Info: o.GetInfo(), FinishReason: o.GetFinishReason(),
	}
}

// FromLimits encodes limits.
func FromLimits(l core.Limits) *Limits {
	return &Limits{
		CpuTimeMs: l.CPUTime.Milliseconds(), MemoryBytes: l.MemoryBytes, Pids: int64(l.Pids), FileSizeBytes: l.FileSizeBytes,
		OpenFiles: int64(l.OpenFiles), TmpBytes: l.TmpBytes, OutputBytes: l.OutputBytes, DiskBytes: l.DiskBytes, Cpus: l.CPUs,
	}
}

// ToLimits decodes limits.
func ToLimits(l *Limits) core.Limits {
	return core.Limits{
		CPUTime: time.Duration(l.GetCpuTimeMs()) * time.Millisecond, MemoryBytes: l.GetMemoryBytes(), Pids: int(l.GetPids()),
		FileSizeBytes: l.GetFileSizeBytes(), OpenFiles: int(l.GetOpenFiles()), TmpBytes: l.GetTmpBytes(),
		OutputBytes: l.GetOutputBytes(), DiskBytes: l.GetDiskBytes(), CPUs: l.GetCpus(),
	}
}

// FromSpec encodes a sandbox spec.
func FromSpec(s core.SandboxSpec) *SandboxSpec {
	return &SandboxSpec{
		Image: utf8(s.Image), Rootfs: utf8(s.Rootfs), Env: utf8Map(s.Env), Limits: FromLimits(s.Limits), Labels: utf8Map(s.Labels),
		TtlMs: s.TTL.Milliseconds(), Network: s.Network, Workdir: utf8(s.Workdir),
	}
}

// ToSpec decodes a sandbox spec.
func ToSpec(s *SandboxSpec) core.SandboxSpec {
	return core.SandboxSpec{
		Image: s.GetImage(), Rootfs: s.GetRootfs(), Env: s.GetEnv(), Limits: ToLimits(s.GetLimits()), Labels: s.GetLabels(),
		TTL: time.Duration(s.GetTtlMs()) * time.Millisecond, Network: s.GetNetwork(), Workdir: s.GetWorkdir(),
	}
}

// FromSandboxInfo encodes sandbox info.
func FromSandboxInfo(i core.SandboxInfo) *SandboxInfo {
	var ms int64
	if !i.CreatedAt.IsZero() {
		ms = i.CreatedAt.UnixMilli()
	}
	return &SandboxInfo{Id: utf8(i.ID), Backend: utf8(i.Backend), Labels: utf8Map(i.Labels), State: utf8(i.State), CreatedUnixMs: ms, Isolation: utf8(i.Isolation)}
}

// ToSandboxInfo decodes sandbox info.
func ToSandboxInfo(i *SandboxInfo) core.SandboxInfo {
	out := core.SandboxInfo{ID: i.GetId(), Backend: i.GetBackend(), Labels: i.GetLabels(), State: i.GetState(), Isolation: i.GetIsolation()}
	if i.GetCreatedUnixMs() != 0 {
		out.CreatedAt = time.UnixMilli(i.GetCreatedUnixMs()).UTC()
	}
	return out
}

// ToSandboxInfos decodes a list response.
func ToSandboxInfos(r *ListResponse) []core.SandboxInfo {
	var out []core.SandboxInfo
	for _, s := range r.GetSandboxes() {
		out = append(out, ToSandboxInfo(s))
	}
	return out
}

// FromSandboxInfos encodes a list response.
func FromSandboxInfos(in []core.SandboxInfo) *ListResponse {
	out := &ListResponse{}
	for _, s := range in {
		out.Sandboxes = append(out.Sandboxes, FromSandboxInfo(s))
	}
	return out
}

// FromExecRequest encodes an exec request. Argv, env values and the
// directory travel as bytes, exactly; env names must be UTF-8 (map keys).
func FromExecRequest(id string, r core.ExecRequest) *ExecRequest {
	out := &ExecRequest{SandboxId: utf8(id), Stdin: r.Stdin, Dir: []byte(r.Dir), TimeoutMs: r.Timeout.Milliseconds(), MaxOutputBytes: r.MaxOutputBytes}
	for _, a := range r.Command {
		out.Command = append(out.Command, []byte(a))
	}
	if r.Env != nil {
		out.Env = make(map[string][]byte, len(r.Env))
		for k, v := range r.Env {
			out.Env[utf8(k)] = []byte(v)
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
