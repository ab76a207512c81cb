package daytona

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/plugins/daytona/fakedaytona"
)

func noEnv(string) string { return "" }

func TestValidateRejects(t *testing.T) {
	key := Config{APIKey: "k"}
	tests := []struct {
		name string
		cfg  Config
		spec core.SandboxSpec
		path []string
	}{
		{"no key", Config{}, core.SandboxSpec{}, []string{"api_key"}},
		{"rootfs", key, core.SandboxSpec{Rootfs: "/srv/root"}, []string{"rootfs"}},
		{"pids", key, core.SandboxSpec{Limits: core.Limits{Pids: 64}}, []string{"limits", "pids"}},
		{"cpu time", key, core.SandboxSpec{Limits: core.Limits{CPUTime: time.Second}}, []string{"limits", "cpu_time"}},
		{"tmp", key, core.SandboxSpec{Limits: core.Limits{TmpBytes: 1}}, []string{"limits", "tmp"}},
		{"file size", key, core.SandboxSpec{Limits: core.Limits{FileSizeBytes: 1}}, []string{"limits", "file_size"}},
		{"open files", key, core.SandboxSpec{Limits: core.Limits{OpenFiles: 10}}, []string{"limits", "open_files"}},
		{"image and snapshot", Config{APIKey: "k", Snapshot: "s"}, core.SandboxSpec{Image: "python"}, []string{"snapshot"}},
		{"resources with snapshot", Config{APIKey: "k", Snapshot: "s"}, core.SandboxSpec{Limits: core.Limits{MemoryBytes: gib}}, []string{"limits", "memory"}},
		{"block all with network", Config{APIKey: "k", NetworkBlockAll: true}, core.SandboxSpec{Network: true}, []string{"network_block_all"}},
		{"allow list without network", Config{APIKey: "k", NetworkAllowList: "10.0.0.0/8"}, core.SandboxSpec{}, []string{"network_allow_list"}},
		{"bad duration", Config{APIKey: "k", APITimeout: "soon"}, core.SandboxSpec{}, []string{"api_timeout"}},
		{"ephemeral vs auto delete", Config{APIKey: "k", Ephemeral: true, AutoDeleteInterval: "1h"}, core.SandboxSpec{}, []string{"ephemeral"}},
		{"relative workdir", key, core.SandboxSpec{Workdir: "ws"}, []string{"workdir"}},
		{"bad env name", key, core.SandboxSpec{Env: map[string]string{"A-B": "x"}}, []string{"env", "A-B"}},
		{"bad url", Config{APIKey: "k", APIURL: "app.daytona.io"}, core.SandboxSpec{}, []string{"api_url"}},
		{"negative cap", Config{APIKey: "k", MaxSandboxes: -1}, core.SandboxSpec{}, []string{"max_sandboxes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, d := validate(tt.cfg, tt.spec, "r", noEnv)
			for _, x := range d {
				if x.Severity == schema.Error && slices.Equal(x.Path, tt.path) {
					return
				}
			}
			t.Errorf("no error at %v: %+v", tt.path, d)
		})
	}
}

func TestValidateMaps(t *testing.T) {
	s, d := validate(Config{}, core.SandboxSpec{
		Limits:  core.Limits{CPUs: 1.5, MemoryBytes: 3*gib + 1, DiskBytes: 10 * gib},
		Network: true, TTL: 150 * time.Second, Labels: map[string]string{"task": "x"},
	}, "run-9", func(k string) string { return map[string]string{apiKeyEnv: "from-env", targetEnv: "eu"}[k] })
	if d.HasErrors() {
		t.Fatal(d.Err())
	}
	if s.apiKey != "from-env" || s.target != "eu" || s.apiURL != defaultAPIURL {
		t.Errorf("env fallbacks: key %q target %q url %q", s.apiKey, s.target, s.apiURL)
	}
	if s.cpus != 2 || s.memGiB != 4 || s.diskGiB != 10 {
		t.Errorf("resources %d cpu %d GiB %d GiB", s.cpus, s.memGiB, s.diskGiB)
	}
	var warned []string
	for _, x := range d {
		warned = append(warned, strings.Join(x.Path, "."))
	}
	if !slices.Equal(warned, []string{"limits.cpus", "limits.memory"}) {
		t.Errorf("warnings at %v", warned)
	}
	if s.autoStop != 3 || s.autoDelete != 0 || s.blockAll || s.outputBytes != defaultOutputBytes || s.workdir != core.DefaultWorkdir {
		t.Errorf("autostop %d autodelete %d blockall %v output %d workdir %q", s.autoStop, s.autoDelete, s.blockAll, s.outputBytes, s.workdir)
	}
	if len(s.labels) != 1 || s.labels["task"] != "x" {
		t.Errorf("labels %v", s.labels)
	}
	s, _ = validate(Config{APIKey: "k", AutoStopInterval: "2h", AutoDeleteInterval: "never"}, core.SandboxSpec{TTL: time.Minute}, "", noEnv)
	if s.autoStop != 120 || s.autoDelete != autoDeleteDisabled || !s.blockAll {
		t.Errorf("explicit intervals: autostop %d autodelete %d blockall %v", s.autoStop, s.autoDelete, s.blockAll)
	}
}

func TestSchemaMatchesConfig(t *testing.T) {
	// Every attribute decodes into Config, and the defaults validate.
	m := map[string]json.RawMessage{}
	for _, a := range configSpec().Attributes {
		if a.Default == nil {
			t.Errorf("%s has no default", a.Name)
			continue
		}
		m[a.Name] = a.Default
	}
	b, _ := json.Marshal(m)
	var c Config
	if err := (schema.Config{Name: "x", JSON: b}).Decode(&c); err != nil {
		t.Fatal(err)
	}
	c.APIKey = "k"
	if _, d := validate(c, core.SandboxSpec{}, "", noEnv); d.HasErrors() {
		t.Fatal(d.Err())
	}
	var sensitive bool
	for _, a := range configSpec().Attributes {
		sensitive = sensitive || (a.Name == "api_key" && a.Sensitive)
	}
	if !sensitive {
		t.Error("api_key not marked Sensitive")
	}
}

func TestConfigureRootfsPath(t *testing.T) {
	srv := newFake(t, fakedaytona.Options{})
	b, d := configure(t, srv, t.TempDir(), core.SandboxSpec{Rootfs: "/r"}, nil)
	defer b.Shutdown(context.Background())
	if !d.HasErrors() || !slices.Equal(d[0].Path, []string{"rootfs"}) {
		t.Errorf("diagnostics %+v", d)
	}
	if n := srv.Count("GET", "/api/", 0); n != 0 {
		t.Errorf("an invalid block still reached the API %d times", n)
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"3", 3 * time.Second, true},
		{"0", 0, true},
		{"3600", retryAfterLimit, true},
		{"-1", 0, false},
		{"", 0, false},
		{"soon", 0, false},
		{now.Add(10 * time.Second).Format(http.TimeFormat), 10 * time.Second, true},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
	}
	for _, tt := range tests {
		h := http.Header{}
		if tt.v != "" {
			h.Set("Retry-After", tt.v)
		}
		got, ok := retryAfter(h, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("Retry-After %q: %v %v, want %v %v", tt.v, got, ok, tt.want, tt.ok)
		}
	}
	full := func(d time.Duration) time.Duration { return d }
	if d := backoff(20, nil, now, full); d != backoffMax {
		t.Errorf("backoff ceiling %v", d)
	}
	h := http.Header{"Retry-After": {"2"}}
	if d := backoff(0, h, now, full); d != 2*time.Second+backoffBase {
		t.Errorf("backoff with Retry-After %v", d)
	}
}

func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"1", "120", "Wed, 21 Oct 2015 07:28:00 GMT", "-5", "1e9", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := retryAfter(http.Header{"Retry-After": {v}}, time.Now())
		if d < 0 || d > retryAfterLimit || (!ok && d != 0) {
			t.Fatalf("%q: %v %v", v, d, ok)
		}
	})
}

func TestParseStatStart(t *testing.T) {
	line := "1234 (a) b) c) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100 18446744073709551615"
	if got, ok := parseStatStart(line); !ok || got != "987654" {
		t.Errorf("got %q %v", got, ok)
	}
	for _, bad := range []string{"", "1 (x", "1 (x) S 1 2", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 notanumber"} {
		if _, ok := parseStatStart(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
	// Our own process has a start token, and a live owner is not dead.
	me := currentOwner()
	if me.Start == "" {
		t.Skip("no /proc here: owner liveness falls back to kill(pid, 0) only")
	}
	if me.dead(me.Host) {
		t.Error("current process judged dead")
	}
	if (owner{Host: me.Host, PID: me.PID, Start: "x/1"}).dead(me.Host) != true {
		t.Error("reused pid judged alive")
	}
	if (owner{Host: "elsewhere", PID: 1 << 22}).dead(me.Host) {
		t.Error("owner on another host judged dead")
	}
	if !(owner{Host: me.Host, PID: deadPID(t)}).dead(me.Host) {
		t.Error("exited process judged alive")
	}
	if o, ok := ownerFromLabels(me.labels()); !ok || o != me {
		t.Errorf("labels round trip: %+v", o)
	}
	if _, ok := ownerFromLabels(map[string]string{ownerPIDLabel: strconv.Itoa(os.Getpid())}); ok {
		t.Error("owner without host accepted")
	}
}

func FuzzParseStatStart(f *testing.F) {
	f.Add("1 (sh) S 1 1 1 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 42 0 0")
	f.Add("((()))")
	f.Fuzz(func(t *testing.T, s string) {
		if v, ok := parseStatStart(s); ok {
			if _, err := strconv.ParseUint(v, 10, 64); err != nil {
				t.Fatalf("%q gave non-number %q", s, v)
			}
		}
	})
}
