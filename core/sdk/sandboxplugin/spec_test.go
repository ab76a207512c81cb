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

func TestCheckCommon(t *testing.T) {
	for in, want := range map[string]string{"": core.DefaultWorkdir, "/w/./x/": "/w/x"} {
		if c, ds := CheckCommon(core.SandboxSpec{Workdir: in}); c.Workdir != want || ds.HasErrors() || c.Labels == nil {
			t.Errorf("CheckCommon(workdir %q) = %+v, %v", in, c, ds)
		}
	}
	for _, bad := range []string{"rel", "/", "/.."} {
		if _, ds := CheckCommon(core.SandboxSpec{Workdir: bad}); !ds.HasErrors() || ds[0].Path[0] != "workdir" {
			t.Errorf("CheckCommon(workdir %q) accepted: %v", bad, ds)
		}
	}
	spec := core.SandboxSpec{Env: map[string]string{"OK_1": "a", "1BAD": "b"}, Labels: map[string]string{"k": "v"}}
	c, ds := CheckCommon(spec)
	if len(c.Env) != 2 || len(ds) != 1 || strings.Join(ds[0].Path, ".") != "env.1BAD" || c.Labels["k"] != "v" {
		t.Errorf("CheckCommon = %+v, %v", c, ds)
	}
	c.Labels["k"] = "changed"
	if spec.Labels["k"] != "v" {
		t.Error("labels are not copied")
	}
}
