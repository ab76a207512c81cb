package sandboxplugin

// Conversions between the sandbox kind's types and its wire messages,
// beside the kind as Nomad keeps them (plugins/device/util.go). Exec and
// file conversions are exported for core/sdk/envplugin, which carries the same
// calls over the sandbox it lends an episode.

import (
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/sdk/wire/rlhostpb"
)

// fromLimits encodes limits.
func fromLimits(l core.Limits) *rlhostpb.Limits {
	return &rlhostpb.Limits{
		CpuTimeMs: l.CPUTime.Milliseconds(), MemoryBytes: l.MemoryBytes, Pids: int64(l.Pids), FileSizeBytes: l.FileSizeBytes,
		OpenFiles: int64(l.OpenFiles), TmpBytes: l.TmpBytes, OutputBytes: l.OutputBytes, DiskBytes: l.DiskBytes, Cpus: l.CPUs,
	}
}

// toLimits decodes limits.
func toLimits(l *rlhostpb.Limits) core.Limits {
	return core.Limits{
		CPUTime: time.Duration(l.GetCpuTimeMs()) * time.Millisecond, MemoryBytes: l.GetMemoryBytes(), Pids: int(l.GetPids()),
		FileSizeBytes: l.GetFileSizeBytes(), OpenFiles: int(l.GetOpenFiles()), TmpBytes: l.GetTmpBytes(),
		OutputBytes: l.GetOutputBytes(), DiskBytes: l.GetDiskBytes(), CPUs: l.GetCpus(),
	}
}

// fromSpec encodes a sandbox spec.
func fromSpec(s core.SandboxSpec) *rlhostpb.SandboxSpec {
	return &rlhostpb.SandboxSpec{
		Image: rlhostpb.ValidUTF8(s.Image), Rootfs: rlhostpb.ValidUTF8(s.Rootfs), Env: rlhostpb.ValidUTF8Map(s.Env), Limits: fromLimits(s.Limits), Labels: rlhostpb.ValidUTF8Map(s.Labels),
		TtlMs: s.TTL.Milliseconds(), Network: s.Network, Workdir: rlhostpb.ValidUTF8(s.Workdir),
	}
}

// toSpec decodes a sandbox spec.
func toSpec(s *rlhostpb.SandboxSpec) core.SandboxSpec {
	return core.SandboxSpec{
		Image: s.GetImage(), Rootfs: s.GetRootfs(), Env: s.GetEnv(), Limits: toLimits(s.GetLimits()), Labels: s.GetLabels(),
		TTL: time.Duration(s.GetTtlMs()) * time.Millisecond, Network: s.GetNetwork(), Workdir: s.GetWorkdir(),
	}
}

// fromSandboxInfo encodes sandbox info.
func fromSandboxInfo(i core.SandboxInfo) *rlhostpb.SandboxInfo {
	var ms int64
	if !i.CreatedAt.IsZero() {
		ms = i.CreatedAt.UnixMilli()
	}
	return &rlhostpb.SandboxInfo{Id: rlhostpb.ValidUTF8(i.ID), Backend: rlhostpb.ValidUTF8(i.Backend), Labels: rlhostpb.ValidUTF8Map(i.Labels), State: rlhostpb.ValidUTF8(i.State), CreatedUnixMs: ms, Isolation: rlhostpb.ValidUTF8(i.Isolation)}
}

// toSandboxInfo decodes sandbox info.
func toSandboxInfo(i *rlhostpb.SandboxInfo) core.SandboxInfo {
	out := core.SandboxInfo{ID: i.GetId(), Backend: i.GetBackend(), Labels: i.GetLabels(), State: i.GetState(), Isolation: i.GetIsolation()}
	if i.GetCreatedUnixMs() != 0 {
		out.CreatedAt = time.UnixMilli(i.GetCreatedUnixMs()).UTC()
	}
	return out
}

// toSandboxInfos decodes a list response.
func toSandboxInfos(r *rlhostpb.ListResponse) []core.SandboxInfo {
	var out []core.SandboxInfo
	for _, s := range r.GetSandboxes() {
		out = append(out, toSandboxInfo(s))
	}
	return out
}

// fromSandboxInfos encodes a list response.
func fromSandboxInfos(in []core.SandboxInfo) *rlhostpb.ListResponse {
	out := &rlhostpb.ListResponse{}
	for _, s := range in {
		out.Sandboxes = append(out.Sandboxes, fromSandboxInfo(s))
	}
	return out
}

// FromExecRequest encodes an exec request. Argv, env values and the
// directory travel as bytes, exactly; env names must be UTF-8 (map keys).
func FromExecRequest(id string, r core.ExecRequest) *rlhostpb.ExecRequest {
	out := &rlhostpb.ExecRequest{SandboxId: rlhostpb.ValidUTF8(id), Stdin: r.Stdin, Dir: []byte(r.Dir), TimeoutMs: r.Timeout.Milliseconds(), MaxOutputBytes: r.MaxOutputBytes}
	for _, a := range r.Command {
		out.Command = append(out.Command, []byte(a))
	}
	if r.Env != nil {
		out.Env = make(map[string][]byte, len(r.Env))
		for k, v := range r.Env {
			out.Env[rlhostpb.ValidUTF8(k)] = []byte(v)
		}
	}
	return out
}

// ToExecRequest decodes an exec request.
func ToExecRequest(r *rlhostpb.ExecRequest) core.ExecRequest {
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
func FromExecResult(r core.ExecResult) *rlhostpb.ExecResult {
	return &rlhostpb.ExecResult{
		ExitCode: int64(r.ExitCode), Stdout: []byte(r.Stdout), Stderr: []byte(r.Stderr), TimedOut: r.TimedOut,
		DurationUs: r.Duration.Microseconds(), Signal: r.Signal, OomKilled: r.OOMKilled, PidsExceeded: r.PidsExceeded,
		CpuTimeExceeded: r.CPUTimeExceeded, OutputTruncated: r.OutputTruncated, Isolation: r.Isolation,
	}
}

// ToExecResult decodes an exec result.
func ToExecResult(r *rlhostpb.ExecResult) core.ExecResult {
	d := time.Duration(r.GetDurationUs()) * time.Microsecond
	return core.ExecResult{
		ExitCode: int(r.GetExitCode()), Stdout: string(r.GetStdout()), Stderr: string(r.GetStderr()), TimedOut: r.GetTimedOut(),
		Duration: d, DurationMS: float64(d.Microseconds()) / 1000, Signal: r.GetSignal(), OOMKilled: r.GetOomKilled(),
		PidsExceeded: r.GetPidsExceeded(), CPUTimeExceeded: r.GetCpuTimeExceeded(), OutputTruncated: r.GetOutputTruncated(),
		Isolation: r.GetIsolation(),
	}
}

// FromFiles encodes a directory listing.
func FromFiles(fs []core.FileInfo) *rlhostpb.ListFilesResponse {
	out := &rlhostpb.ListFilesResponse{}
	for _, f := range fs {
		out.Files = append(out.Files, &rlhostpb.FileInfo{Path: []byte(f.Path), Size: f.Size, Mode: f.Mode, IsDir: f.IsDir, ModTimeUnixMs: f.ModTime.UnixMilli()})
	}
	return out
}

// ToFiles decodes a directory listing.
func ToFiles(r *rlhostpb.ListFilesResponse) []core.FileInfo {
	var out []core.FileInfo
	for _, f := range r.GetFiles() {
		out = append(out, core.FileInfo{Path: string(f.GetPath()), Size: f.GetSize(), Mode: f.GetMode(), IsDir: f.GetIsDir(), ModTime: time.UnixMilli(f.GetModTimeUnixMs()).UTC()})
	}
	return out
}
