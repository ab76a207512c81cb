package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// A training run is reproducible at any concurrency: the same job file and
// seed give the same metrics.jsonl (timings aside) and byte-identical
// final weights, run after run, with 8 episodes in flight. Sampling is
// keyed by (seed, choice, position), a group's shared first request
// carries the group's seed whichever episode sends it, and the embedded
// server's forward gives a sequence the same logits whatever it is
// batched with. The quickstart as shipped runs one group at a time; the
// second job runs eight groups of two at once, so requests of different
// groups share the server's forward passes in an order timing decides.
func TestTrainingReproducibleAtConcurrency(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model four times")
	}
	src, err := os.ReadFile(filepath.Join("..", "..", "..", "examples", "quickstart.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		job  string
	}{
		{"quickstart", string(src)},
		{"eight groups of two", strings.NewReplacer(
			"batch_size  = 4  # tasks per step", "batch_size  = 16",
			"group_size  = 8  # completions per task: the GRPO group", "group_size  = 2").Replace(string(src))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(tc.job, "concurrency = 8") || tc.name != "quickstart" && !strings.Contains(tc.job, "group_size  = 2") {
				t.Fatal("the job is not the one this test means to run")
			}
			var metrics [2][]map[string]any
			var weights [2][]byte
			for i := range 2 {
				dir := t.TempDir()
				copyDir(t, filepath.Join("..", "..", "..", "examples", "quickstart"), filepath.Join(dir, "quickstart"))
				write(t, dir, "job.hcl", tc.job)
				if r := rlhost(t, dir, "run", "job.hcl", "--steps", "4", "--var", "warmup_steps=20", "--out", "out"); r.code != 0 {
					t.Fatalf("run %d failed: %+v", i, r)
				}
				metrics[i] = untimedMetrics(t, filepath.Join(dir, "out", "metrics.jsonl"))
				if weights[i], err = os.ReadFile(filepath.Join(dir, "out", "final", "model.safetensors")); err != nil {
					t.Fatal(err)
				}
			}
			if len(metrics[0]) != 4 {
				t.Fatalf("%d metrics lines, want 4", len(metrics[0]))
			}
			for step := range metrics[0] {
				if !reflect.DeepEqual(metrics[0][step], metrics[1][step]) {
					a, _ := json.Marshal(metrics[0][step])
					b, _ := json.Marshal(metrics[1][step])
					t.Fatalf("step %d differs:\n%s\n%s", step, a, b)
				}
			}
			if !bytes.Equal(weights[0], weights[1]) {
				t.Fatal("the final weights differ")
			}
		})
	}
}

// untimedMetrics reads metrics.jsonl without what measures time (and the
// run id, which holds the start time): keys ending in _ms, _ms_mean or _s,
// and the time/ group.
func untimedMetrics(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	timed := func(k string) bool {
		return k == "run_id" || strings.HasPrefix(k, "time/") || strings.HasSuffix(k, "_ms") || strings.HasSuffix(k, "_ms_mean") || strings.HasSuffix(k, "_s")
	}
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		for k, v := range m {
			if timed(k) {
				delete(m, k)
			}
			if extra, ok := v.(map[string]any); ok {
				for k := range extra {
					if timed(k) {
						delete(extra, k)
					}
				}
			}
		}
		out = append(out, m)
	}
	return out
}

// copyDir copies the regular files of src into a new directory dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		write(t, dst, e.Name(), string(b))
	}
}
