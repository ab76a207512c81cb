package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/sdk/envplugin"
	"github.com/rlhost/rlhost/host/config"
	"github.com/rlhost/rlhost/host/job"
	"github.com/rlhost/rlhost/host/pluginmgr"
)

// One crash is one restart, however many episodes notice it at once, and
// no replaced plugin process is left running.
func TestConcurrentCallersShareOneRestart(t *testing.T) {
	ctx := context.Background()
	probe := buildPlugin(t, "./testdata/probeenv", "probeenv")
	f, diags := config.Parse(filepath.Join(t.TempDir(), "job.hcl"), []byte(`env "probe" {
  plugin = "`+probe+`"
  marker = "/nonexistent/never"
}
`), nil)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	mgr, err := pluginmgr.New(pluginmgr.Options{Self: rlhostBin, Builtins: builtinNames(), Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	in, d := job.StartEnv(ctx, f, f.Envs[0], mgr, "restart-test")
	if d.HasErrors() {
		t.Fatal(d)
	}
	live := func() []string { return processesOf(probe) }
	procs := live()
	if len(procs) != 1 {
		t.Fatalf("want one plugin process, got %v", procs)
	}
	pid, _ := strconv.Atoi(strings.SplitN(procs[0], ":", 2)[0])
	syscall.Kill(pid, syscall.SIGKILL)
	for !in.Exited() {
		time.Sleep(10 * time.Millisecond)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := in.Env(ctx); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a caller failed instead of sharing the restart: %v", err)
	}
	if procs := live(); len(procs) != 1 {
		t.Errorf("after one crash and one restart, plugin processes: %v", procs)
	}
	env, err := in.Env(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tasks, err := env.Tasks(ctx); err != nil || len(tasks) != 4 {
		t.Errorf("restarted plugin does not answer: %v %v", tasks, err)
	}
	mgr.StopAll(ctx)
	waitNoProcesses(t, probe)
}

// A real env plugin process, reached on its episode socket, that is killed
// in the middle of a Step: the Step fails at once with an error the host
// reads as a crash, and the plugin is restarted, as over gRPC.
func TestEnvPluginKilledMidStep(t *testing.T) {
	ctx := context.Background()
	probe := buildPlugin(t, "./testdata/probeenv", "probeenv")
	f, diags := config.Parse(filepath.Join(t.TempDir(), "job.hcl"), []byte(fmt.Sprintf(`env "probe" {
  plugin = %q
  marker = %q
}
`, probe, filepath.Join(t.TempDir(), "marker"))), nil)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	mgr, err := pluginmgr.New(pluginmgr.Options{Self: rlhostBin, Builtins: builtinNames(), Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		mgr.StopAll(ctx)
		waitNoProcesses(t, probe)
	}()
	in, d := job.StartEnv(ctx, f, f.Envs[0], mgr, "killed-test")
	if d.HasErrors() {
		t.Fatal(d)
	}
	step := stepper(ctx, t, in)
	if obs, err := step("noop"); err != nil || obs.Info["wire"] != "frames" {
		t.Fatalf("a step: %+v, %v; want it sent on the episode socket", obs, err)
	}
	killMidStep(t, in, step)
}

// stepper returns a function that runs one episode of in's env to one
// Step with the given reply, on the task "t0".
func stepper(ctx context.Context, t *testing.T, in *pluginmgr.Instance) func(string) (envplugin.Observation, error) {
	return func(content string) (envplugin.Observation, error) {
		t.Helper()
		env, err := in.Env(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sess, _, err := env.NewEpisode(ctx, envplugin.Episode{ID: content, Task: core.Task{ID: "t0"}})
		if err != nil {
			t.Fatal(err)
		}
		defer sess.End(ctx, core.FinishCancelled)
		return sess.Step(ctx, core.Message{Role: core.RoleAssistant, Content: content})
	}
}

// killMidStep has the probe env kill its own process in the middle of a
// Step (the reply "CRASH"): the step must fail promptly with
// ErrUnavailable, read as a crash, and the restarted plugin must serve the
// next step on its episode socket again.
func killMidStep(t *testing.T, in *pluginmgr.Instance, step func(string) (envplugin.Observation, error)) {
	t.Helper()
	start := time.Now()
	_, err := step("CRASH")
	if !errors.Is(err, core.ErrUnavailable) {
		t.Fatalf("a step whose plugin was killed: %v, want ErrUnavailable", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the step took %v to fail", took)
	}
	if err := in.Crashed(err); !errors.Is(err, pluginmgr.ErrPluginExited) {
		t.Fatalf("not read as a crash: %v", err)
	}
	if obs, err := step("noop"); err != nil || obs.Info["wire"] != "frames" {
		t.Fatalf("a step on the restarted plugin: %+v, %v", obs, err)
	}
}
