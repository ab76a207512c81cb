package main

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

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
