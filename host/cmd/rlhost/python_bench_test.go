package main

// Benchmarks of environment plugins written in Python (run by `make bench`,
// never by `make test`): the same work through a Go env and a Python env,
// interleaved in one loop against one backend, so the ratio is the cost of
// the Python SDK and interpreter.

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/sdk/envplugin"
	"github.com/rlhost/rlhost/core/sdk/envplugin/envtest"
	"github.com/rlhost/rlhost/host/config"
	"github.com/rlhost/rlhost/host/job"
	"github.com/rlhost/rlhost/host/pluginmgr"
)

// BenchmarkPythonEnv measures, per iteration and interleaved:
//
//	exec:    one Step that runs `true` in the lent sandbox, through the Go
//	         probe env and through the Python probe env, against the same
//	         exec sent straight to the backend;
//	episode: NewEpisode + Step + End of the echo env (write the reply, cat
//	         it back) in Go (examples/echo-env) and in Python
//	         (examples/python-env/echo_env.py), each in a fresh sandbox
//	         whose creation is not timed.
func BenchmarkPythonEnv(b *testing.B) {
	ctx := context.Background()
	goProbe := buildPlugin(b, "./testdata/probeenv", "probeenv")
	goEcho := buildPlugin(b, "../../../examples/echo-env", "echo-env")
	pyProbe, _ := filepath.Abs("testdata/pyprobe/probe_env.py")
	pyEcho, _ := filepath.Abs("../../../examples/python-env/echo_env.py")
	src := fmt.Sprintf(`
run { env = env.goprobe }
sandbox "s" { backend = "local" }
env "goprobe" {
  plugin = %q
  marker = "/nonexistent/never"
}
env "pyprobe" {
  plugin   = %q
  python   = %q
  greeting = "hi"
}
env "goecho" { plugin = %q }
env "pyecho" {
  plugin = %q
  python = %q
}
`, goProbe, pyProbe, systemPython, goEcho, pyEcho, systemPython)
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
	backend, _ := bin.Backend(ctx)
	envs := map[string]*envplugin.Client{}
	for _, e := range f.Envs {
		in, d := job.StartEnv(ctx, f, e, mgr, "bench")
		if d.HasErrors() {
			b.Fatal(d)
		}
		envs[e.Name], _ = in.Env(ctx)
	}
	newSandbox := func() *envtest.BackendSandbox {
		info, err := backend.Create(ctx, core.SandboxSpec{})
		if err != nil {
			b.Fatal(err)
		}
		return &envtest.BackendSandbox{Backend: backend, SandboxID: info.ID, DefaultTimeout: 10 * time.Second}
	}
	// One open episode per probe env, stepped with "exec" in its own sandbox.
	execBox := newSandbox()
	defer backend.Destroy(ctx, execBox.SandboxID)
	probe := map[string]envplugin.Session{}
	for _, name := range []string{"goprobe", "pyprobe"} {
		tasks, err := envs[name].Tasks(ctx)
		if err != nil {
			b.Fatal(err)
		}
		sess, _, err := envs[name].NewEpisode(ctx, envplugin.Episode{ID: "bench-" + name, Task: tasks[0], Sandbox: execBox})
		if err != nil {
			b.Fatal(err)
		}
		defer sess.End(ctx, core.FinishCancelled)
		probe[name] = sess
	}
	echoTask := map[string]core.Task{}
	for _, name := range []string{"goecho", "pyecho"} {
		tasks, err := envs[name].Tasks(ctx)
		if err != nil {
			b.Fatal(err)
		}
		echoTask[name] = tasks[0] // the word "hello"
	}
	episode := func(name string, i int) time.Duration {
		sb := newSandbox()
		defer backend.Destroy(ctx, sb.SandboxID)
		t0 := time.Now()
		sess, _, err := envs[name].NewEpisode(ctx, envplugin.Episode{ID: fmt.Sprintf("%s-%d", name, i), Task: echoTask[name], Sandbox: sb})
		if err != nil {
			b.Fatal(err)
		}
		obs, err := sess.Step(ctx, core.Message{Role: core.RoleAssistant, Content: "hello"})
		if err != nil || obs.Reward != 1 {
			b.Fatalf("%s step: %v %+v", name, err, obs)
		}
		if _, err := sess.End(ctx, ""); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	req := core.ExecRequest{Command: []string{"true"}, Timeout: 10 * time.Second}
	exec := core.Message{Role: core.RoleAssistant, Content: "exec"}
	var direct, goExec, pyExec, goEp, pyEp []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if res, err := backend.Exec(ctx, execBox.SandboxID, req); err != nil || res.ExitCode != 0 {
			b.Fatalf("backend exec: %v %+v", err, res)
		}
		t1 := time.Now()
		if _, err := probe["goprobe"].Step(ctx, exec); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if _, err := probe["pyprobe"].Step(ctx, exec); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		direct, goExec, pyExec = append(direct, t1.Sub(t0)), append(goExec, t2.Sub(t1)), append(pyExec, t3.Sub(t2))
		goEp, pyEp = append(goEp, episode("goecho", i)), append(pyEp, episode("pyecho", i))
	}
	b.StopTimer()
	md, mg, mp := median(direct), median(goExec), median(pyExec)
	eg, ep := median(goEp), median(pyEp)
	b.ReportMetric(us(mg), "go-exec-us")
	b.ReportMetric(us(mp), "py-exec-us")
	b.ReportMetric(us(eg), "go-episode-us")
	b.ReportMetric(us(ep), "py-episode-us")
	if b.N >= 20 {
		benchRow(b, fmt.Sprintf("| sandbox exec of `true` in a Step | %d | %.0f | %.0f | %.0f | %.2f× |",
			b.N, us(md), us(mg), us(mp), float64(mp)/float64(mg)))
		benchRow(b, fmt.Sprintf("| echo episode: NewEpisode + Step (write, cat) + End | %d | | %.0f | %.0f | %.2f× |",
			b.N, us(eg), us(ep), float64(ep)/float64(eg)))
	}
}
