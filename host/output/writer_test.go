package output

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
)

func traj(step, index int, content string) core.Trajectory {
	return core.Trajectory{
		RunID: "run", Step: step, Index: index, TaskID: fmt.Sprintf("t%d", index),
		Messages:     []core.Message{{Role: core.RoleUser, Content: content}},
		FinishReason: core.FinishDone,
	}
}

// readLines parses every line of a JSONL file, failing on any invalid one.
func readLines[T any](t *testing.T, path string) []T {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Fatalf("%s does not end with a newline", path)
	}
	var out []T
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 64<<20)
	for n := 1; sc.Scan(); n++ {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("%s:%d: invalid JSON: %v", path, n, err)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestCrashRecovery(t *testing.T) {
	tests := []struct {
		name      string
		torn      string // bytes a crash left after the good lines
		goodLines int
	}{
		{name: "no torn line", torn: "", goodLines: 3},
		{name: "short torn line", torn: `{"run_id":"run","st`, goodLines: 3},
		{name: "torn line longer than a scan chunk", torn: `{"run_id":"` + strings.Repeat("x", 3*tailChunk+17), goodLines: 2},
		{name: "only a torn line", torn: `{"run_id"`, goodLines: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			w, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			for i := range tc.goodLines {
				if err := w.WriteTrajectory(traj(0, i, strings.Repeat("y", i*tailChunk/2))); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.WriteStep(core.StepMetrics{RunID: "run", Step: 0}); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, TrajectoriesFile)
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			// Simulate a crash in the middle of a write.
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteString(tc.torn); err != nil {
				t.Fatal(err)
			}
			f.Close()

			w, err = Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			rec := w.Recovered()
			switch {
			case tc.torn == "" && len(rec) != 0:
				t.Fatalf("recovered %v from an intact file", rec)
			case tc.torn != "" && (len(rec) != 1 || rec[0].File != path || rec[0].DroppedBytes != int64(len(tc.torn))):
				t.Fatalf("recovered %v, want %d bytes dropped from %s", rec, len(tc.torn), path)
			}
			after, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(before, after) {
				t.Fatalf("earlier lines changed: %d bytes before, %d after", len(before), len(after))
			}
			// Writing goes on after the repaired tail.
			if err := w.WriteTrajectory(traj(1, 99, "after")); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			got := readLines[core.Trajectory](t, path)
			if len(got) != tc.goodLines+1 || got[len(got)-1].Index != 99 {
				t.Fatalf("got %d lines (last %+v), want %d ending with index 99", len(got), got[len(got)-1], tc.goodLines+1)
			}
			if n := len(readLines[core.StepMetrics](t, filepath.Join(dir, MetricsFile))); n != 1 {
				t.Fatalf("metrics.jsonl has %d lines, want 1", n)
			}
		})
	}
}

func TestConcurrentWritesStayValidJSONL(t *testing.T) {
	dir := t.TempDir()
	w, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	const writers, perWriter = 8, 40
	var wg sync.WaitGroup
	errs := make(chan error, writers*perWriter)
	for g := range writers {
		wg.Go(func() {
			for i := range perWriter {
				// Lines of varied size, some far above a pipe or page size.
				content := strings.Repeat(string(rune('a'+g)), (i%4)*8000+1)
				if err := w.WriteTrajectory(traj(g, i, content)); err != nil {
					errs <- err
				}
			}
			if err := w.WriteStep(core.StepMetrics{RunID: "run", Step: g}); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got := readLines[core.Trajectory](t, filepath.Join(dir, TrajectoriesFile))
	if len(got) != writers*perWriter {
		t.Fatalf("got %d trajectories, want %d", len(got), writers*perWriter)
	}
	seen := map[[2]int]bool{}
	for _, tr := range got {
		c := tr.Messages[0].Content
		if strings.Trim(c, string(rune('a'+tr.Step))) != "" {
			t.Fatalf("step %d index %d: content mixes writers", tr.Step, tr.Index)
		}
		seen[[2]int{tr.Step, tr.Index}] = true
	}
	if len(seen) != writers*perWriter {
		t.Fatalf("%d distinct trajectories, want %d", len(seen), writers*perWriter)
	}
	if n := len(readLines[core.StepMetrics](t, filepath.Join(dir, MetricsFile))); n != writers {
		t.Fatalf("metrics.jsonl has %d lines, want %d", n, writers)
	}
}

func TestWriteSummaryAtomicReplace(t *testing.T) {
	dir := t.TempDir()
	w, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := Summary{RunID: "r1", TotalSteps: 2, StartedAt: start}
	for step := range 2 {
		s.AddStep(core.StepMetrics{Step: step, Episodes: 4, RewardMean: float64(step)})
		if err := w.WriteSummary(s); err != nil {
			t.Fatal(err)
		}
	}
	var got Summary
	data, err := os.ReadFile(filepath.Join(dir, SummaryFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if got.StepsDone != 2 || got.Episodes != 8 || got.RewardMean != 0.5 || !got.StartedAt.Equal(start) {
		t.Fatalf("summary read back as %+v", got)
	}
	if bytes.Contains(data, []byte("ended_at")) {
		t.Fatalf("ended_at written while the run is going: %s", data)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Fatalf("temp file %s left behind", e.Name())
		}
	}
}

func TestWriteAfterClose(t *testing.T) {
	w, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteTrajectory(traj(0, 0, "x")); err == nil {
		t.Fatal("write after Close succeeded")
	}
}
