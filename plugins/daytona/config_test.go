package daytona

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
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

// TestBackoff checks how the backend combines core/retry's pieces: the
// server's Retry-After (capped) plus a little jitter, else the ceiling.
func TestBackoff(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	full := func(d time.Duration) time.Duration { return d }
	tests := []struct {
		name    string
		attempt int
		after   string
		want    time.Duration
	}{
		{"ceiling", 20, "", backoffMax},
		{"first", 0, "", backoffBase},
		{"seconds", 0, "2", 2*time.Second + backoffBase},
		{"fraction", 0, "0.5", 500*time.Millisecond + backoffBase},
		{"date", 3, now.Add(4 * time.Second).Format(http.TimeFormat), 4*time.Second + backoffBase},
		{"capped", 0, "3600", retryAfterLimit + backoffBase},
		{"unreadable", 1, "soon", 2 * backoffBase},
	}
	for _, tt := range tests {
		h := http.Header{}
		if tt.after != "" {
			h.Set("Retry-After", tt.after)
		}
		if d := backoff(tt.attempt, h, now, full); d != tt.want {
			t.Errorf("%s: backoff = %v, want %v", tt.name, d, tt.want)
		}
	}
}
