package main

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"unsafe"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/envplugin"
	"github.com/rlhost/rlhost/host/config"
	"github.com/rlhost/rlhost/host/job"
	"github.com/rlhost/rlhost/host/pluginmgr"
)

type nopSandbox struct{}

func (nopSandbox) ID() string { return "nop" }
func (nopSandbox) Exec(context.Context, core.ExecRequest) (core.ExecResult, error) {
	return core.ExecResult{}, nil
}
func (nopSandbox) ReadFile(context.Context, string, int64) ([]byte, error)   { return nil, nil }
func (nopSandbox) WriteFile(context.Context, string, []byte, uint32) error   { return nil }
func (nopSandbox) ListFiles(context.Context, string) ([]core.FileInfo, error) { return nil, nil }

func BenchmarkExpHop(b *testing.B) {
	ctx := context.Background()
	probe := buildPlugin(b, "./testdata/probeenv", "probeenv")
	src := fmt.Sprintf(`
env "probe" {
  plugin = %q
  marker = "/nonexistent/never"
}
`, probe)
	f, diags := config.Parse(filepath.Join(b.TempDir(), "bench.hcl"), []byte(src), nil)
	if diags.HasErrors() {
		b.Fatal(diags)
	}
	mgr, err := pluginmgr.New(pluginmgr.Options{Self: rlhostBin, Builtins: builtinNames(), Logger: hclog.NewNullLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer mgr.StopAll(ctx)
	ein, d := job.StartEnv(ctx, f, f.Envs[0], mgr, "bench")
	if d.HasErrors() {
		b.Fatal(d)
	}
	env, _ := ein.Env(ctx)
	sess, _, err := env.NewEpisode(ctx, envplugin.Episode{ID: "bench", Task: core.Task{ID: "t0"}, Sandbox: nopSandbox{}})
	if err != nil {
		b.Fatal(err)
	}
	defer sess.End(ctx, core.FinishCancelled)
	reply := core.Message{Role: core.RoleAssistant, Content: "exec"}
	var full []time.Duration
	for i := 0; i < b.N; i++ {
		t2 := time.Now()
		if _, err := sess.Step(ctx, reply); err != nil {
			b.Fatal(err)
		}
		full = append(full, time.Since(t2))
	}
	b.ReportMetric(us(median(full)), "hop-us")
}

type timedSandbox struct {
	envplugin.Sandbox
	last   time.Duration
	in, out int64
}

func mono() int64 {
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 1, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}

func (s *timedSandbox) Exec(ctx context.Context, req core.ExecRequest) (core.ExecResult, error) {
	s.in = mono()
	t0 := time.Now()
	r, err := s.Sandbox.Exec(ctx, req)
	s.last = time.Since(t0)
	s.out = mono()
	return r, err
}

func BenchmarkExpHopReal(b *testing.B) {
	for _, iso := range []string{"namespaces", "none"} {
		b.Run(iso, func(b *testing.B) { expHopReal(b, iso) })
	}
}

func expHopReal(b *testing.B, isolation string) {
	ctx := context.Background()
	probe := buildPlugin(b, "./testdata/probeenv", "probeenv")
	src := fmt.Sprintf(`
sandbox "s" {
  backend = "local"
  isolation = %q
}
env "probe" {
  plugin = %q
  marker = "/nonexistent/never"
}
`, isolation, probe)
	f, diags := config.Parse(filepath.Join(b.TempDir(), "bench.hcl"), []byte(src), nil)
	if diags.HasErrors() {
		b.Fatal(diags)
	}
	mgr, err := pluginmgr.New(pluginmgr.Options{Self: rlhostBin, Builtins: builtinNames(), Logger: hclog.NewNullLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer mgr.StopAll(ctx)
	bin, d := job.StartBackend(ctx, f, f.Sandboxes[0], mgr, "bench")
	if d.HasErrors() {
		b.Fatal(d)
	}
	ein, d := job.StartEnv(ctx, f, f.Envs[0], mgr, "bench")
	if d.HasErrors() {
		b.Fatal(d)
	}
	backend, _ := bin.Backend(ctx)
	env, _ := ein.Env(ctx)
	info, err := backend.Create(ctx, core.SandboxSpec{})
	if err != nil {
		b.Fatal(err)
	}
	defer backend.Destroy(ctx, info.ID)
	lent := &timedSandbox{Sandbox: &envtestBackendSandbox{backend: backend, id: info.ID}}
	sess, _, err := env.NewEpisode(ctx, envplugin.Episode{ID: "bench", Task: core.Task{ID: "t0"}, Sandbox: lent})
	if err != nil {
		b.Fatal(err)
	}
	defer sess.End(ctx, core.FinishCancelled)
	req := core.ExecRequest{Command: []string{"true"}, Timeout: 10 * time.Second}
	reply := core.Message{Role: core.RoleAssistant, Content: "exec"}
	var direct, full, inner []time.Duration
	var legA, legB, legC, legD []time.Duration
	defer func() {
		b.ReportMetric(us(median(legA)), "A-host-to-envstep-us")
		b.ReportMetric(us(median(legB)), "B-env-to-hostexec-us")
		b.ReportMetric(us(median(legC)), "C-hostexec-to-env-us")
		b.ReportMetric(us(median(legD)), "D-envstep-to-host-us")
	}()
	for i := 0; i < b.N; i++ {
		t1 := time.Now()
		if res, err := backend.Exec(ctx, info.ID, req); err != nil || res.ExitCode != 0 {
			b.Fatalf("backend exec: %v %+v", err, res)
		}
		t2 := time.Now()
		m0 := mono()
		obs, err := sess.Step(ctx, reply)
		if err != nil {
			b.Fatal(err)
		}
		m1 := mono()
		t3 := time.Now()
		direct, full, inner = append(direct, t2.Sub(t1)), append(full, t3.Sub(t2)), append(inner, lent.last)
		e0, e1, e2 := int64(obs.Metrics["t0"]), int64(obs.Metrics["t1"]), int64(obs.Metrics["t2"])
		legA = append(legA, time.Duration(e0-m0))
		legB = append(legB, time.Duration(lent.in-e0))
		legC = append(legC, time.Duration(e1-lent.out))
		legD = append(legD, time.Duration(m1-e1))
		_ = e2
	}
	md, mf, mi := median(direct), median(full), median(inner)
	b.ReportMetric(us(md), "backend-us")
	b.ReportMetric(us(mf), "env-us")
	b.ReportMetric(us(mi), "inner-us")
	b.ReportMetric(us(mf-md), "env-hop-us")
	b.ReportMetric(us(mf-mi), "rpc-us")
}

type envtestBackendSandbox struct {
	backend interface {
		Exec(ctx context.Context, id string, req core.ExecRequest) (core.ExecResult, error)
	}
	id string
}

func (s *envtestBackendSandbox) ID() string { return s.id }
func (s *envtestBackendSandbox) Exec(ctx context.Context, req core.ExecRequest) (core.ExecResult, error) {
	if req.Timeout == 0 {
		req.Timeout = 10 * time.Second
	}
	return s.backend.Exec(ctx, s.id, req)
}
func (envtestBackendSandbox) ReadFile(context.Context, string, int64) ([]byte, error) { return nil, nil }
func (envtestBackendSandbox) WriteFile(context.Context, string, []byte, uint32) error { return nil }
func (envtestBackendSandbox) ListFiles(context.Context, string) ([]core.FileInfo, error) {
	return nil, nil
}

func BenchmarkExpEpisode(b *testing.B) {
	ctx := context.Background()
	probe := buildPlugin(b, "./testdata/probeenv", "probeenv")
	src := fmt.Sprintf(`
env "probe" {
  plugin = %q
  marker = "/nonexistent/never"
}
`, probe)
	f, diags := config.Parse(filepath.Join(b.TempDir(), "bench.hcl"), []byte(src), nil)
	if diags.HasErrors() {
		b.Fatal(diags)
	}
	mgr, err := pluginmgr.New(pluginmgr.Options{Self: rlhostBin, Builtins: builtinNames(), Logger: hclog.NewNullLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer mgr.StopAll(ctx)
	ein, d := job.StartEnv(ctx, f, f.Envs[0], mgr, "bench")
	if d.HasErrors() {
		b.Fatal(d)
	}
	env, _ := ein.Env(ctx)
	reply := core.Message{Role: core.RoleAssistant, Content: "exec"}
	var starts, steps, ends []time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		sess, _, err := env.NewEpisode(ctx, envplugin.Episode{ID: fmt.Sprint("bench", i), Task: core.Task{ID: "t0"}, Sandbox: nopSandbox{}})
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := sess.Step(ctx, reply); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		sess.End(ctx, core.FinishDone)
		t3 := time.Now()
		starts, steps, ends = append(starts, t1.Sub(t0)), append(steps, t2.Sub(t1)), append(ends, t3.Sub(t2))
	}
	b.ReportMetric(us(median(starts)), "new-us")
	b.ReportMetric(us(median(steps)), "step-us")
	b.ReportMetric(us(median(ends)), "end-us")
}
