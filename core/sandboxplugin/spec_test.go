package sandboxplugin

import (
	"strings"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
)

func TestCheckLimits(t *testing.T) {
	l := core.Limits{MemoryBytes: 1 << 30, TmpBytes: 1 << 20, CPUTime: time.Second, DiskBytes: -1}
	ds := CheckLimits(l, "the x backend", []string{"memory", "disk"}, "x cannot enforce %s")
	got := map[string]string{}
	for _, d := range ds {
		got[strings.Join(d.Path, ".")] = d.Summary + ": " + d.Detail
	}
	want := map[string]string{
		"limits.tmp":      "limits.tmp is not supported by the x backend: x cannot enforce tmp",
		"limits.cpu_time": "limits.cpu_time is not supported by the x backend: x cannot enforce cpu_time",
		"limits.disk":     "limit must be >= 0: limits.disk = -1",
	}
	if len(got) != len(want) {
		t.Fatalf("diagnostics %v, want %v", got, want)
	}
	for p, w := range want {
		if got[p] != w {
			t.Errorf("%s: %q, want %q", p, got[p], w)
		}
	}
	// Every limit is named as the limits block writes it.
	for _, n := range (core.Limits{}).Named() {
		if strings.Contains(n.Name, "bytes") {
			t.Errorf("limit named %q", n.Name)
		}
	}
}

func TestCheckWorkdirAndEnv(t *testing.T) {
	for in, want := range map[string]string{"": core.DefaultWorkdir, "/w/./x/": "/w/x"} {
		if got, ds := CheckWorkdir(core.SandboxSpec{Workdir: in}); got != want || ds.HasErrors() {
			t.Errorf("CheckWorkdir(%q) = %q, %v", in, got, ds)
		}
	}
	for _, bad := range []string{"rel", "/", "/.."} {
		if _, ds := CheckWorkdir(core.SandboxSpec{Workdir: bad}); !ds.HasErrors() || ds[0].Path[0] != "workdir" {
			t.Errorf("CheckWorkdir(%q) accepted: %v", bad, ds)
		}
	}
	env, ds := CheckEnv(core.SandboxSpec{Env: map[string]string{"OK_1": "a", "1BAD": "b"}})
	if len(env) != 2 || len(ds) != 1 || strings.Join(ds[0].Path, ".") != "env.1BAD" {
		t.Errorf("CheckEnv = %v, %v", env, ds)
	}
}
