package sandboxplugin

// Conversions between the sandbox kind's types and its wire messages,
// beside the kind as Nomad keeps them (plugins/device/util.go). Those of
// exec requests, results and listings, which the lent sandbox carries too,
// are rlhostpb's.

import (
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/sdk/wire/lend"
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

// fromLendTimeout asks for a sandbox its backend lends itself, with
// defaultTimeout for each lent exec that names none.
func fromLendTimeout(defaultTimeout time.Duration) *rlhostpb.LendRequest {
	return &rlhostpb.LendRequest{DefaultTimeoutMs: defaultTimeout.Milliseconds()}
}

// toLendTimeout is the default timeout a lend request names.
func toLendTimeout(q *rlhostpb.LendRequest) time.Duration {
	return time.Duration(q.GetDefaultTimeoutMs()) * time.Millisecond
}

// fromLease encodes a lease; nil for the zero Lease.
func fromLease(l lend.Lease) *rlhostpb.Lease {
	if l.Socket == "" {
		return nil
	}
	return &rlhostpb.Lease{Socket: l.Socket, Token: l.Token()}
}

// toLease decodes a lease; the zero Lease for none.
func toLease(l *rlhostpb.Lease) lend.Lease {
	if l.GetSocket() == "" {
		return lend.Lease{}
	}
	return lend.NewLease(l.GetSocket(), l.GetToken())
}

// fromUsage encodes what was done through a lease.
func fromUsage(u lend.Usage) *rlhostpb.LeaseUse {
	return &rlhostpb.LeaseUse{Execs: u.Execs, Timeouts: u.Timeouts, ExecNs: int64(u.ExecTime)}
}

// toUsage decodes what was done through a lease; zero when the reply
// carries none.
func toUsage(u *rlhostpb.LeaseUse) lend.Usage {
	return lend.Usage{Execs: u.GetExecs(), Timeouts: u.GetTimeouts(), ExecTime: time.Duration(u.GetExecNs())}
}
