package training

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/host/output"
)

// TrimOutputs cuts the files back to the checkpoint and restores the
// metrics lines a crash between checkpoint and line lost; episodes past
// the checkpoint that finished stay, for the resumed run to use, and the
// ones Ctrl-C cancelled go.
func TestTrimOutputs(t *testing.T) {
	step := func(i int) core.StepMetrics {
		return core.StepMetrics{RunID: "r", Step: i, RewardMean: float64(i) / 10, Extra: map[string]float64{"train/loss": float64(i)}}
	}
	line := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(b) + "\n"
	}
	traj := func(i int) string { return line(map[string]any{"step": i, "task_id": "t", "finish_reason": "done"}) }
	cancelled := func(i int) string {
		return line(map[string]any{"step": i, "task_id": "t", "finish_reason": "cancelled"})
	}
	for _, tc := range []struct {
		name      string
		metrics   string // file content
		trajs     string
		state     RunState
		wantSteps []int
		wantTraj  int // trajectory lines kept
		wantAhead int // of them, episodes of steps still to run
	}{
		{"metrics past the checkpoint go, finished episodes stay", line(step(0)) + line(step(1)) + line(step(2)), traj(0) + traj(1) + traj(2) + cancelled(2) + traj(3),
			RunState{NextStep: 2, Steps: []core.StepMetrics{step(0), step(1)}}, []int{0, 1}, 4, 2},
		{"a line lost after the checkpoint comes back", line(step(0)), traj(0) + traj(1),
			RunState{NextStep: 2, Steps: []core.StepMetrics{step(0), step(1)}}, []int{0, 1}, 2, 0},
		{"a partial last line is dropped and restored", line(step(0)) + `{"run_id":"r","st`, traj(0) + traj(1),
			RunState{NextStep: 2, Steps: []core.StepMetrics{step(0), step(1)}}, []int{0, 1}, 2, 0},
		{"an old checkpoint without steps keeps what the file has", line(step(0)), traj(0),
			RunState{NextStep: 2}, []int{0}, 1, 0},
		{"no metrics file at all", "", traj(0),
			RunState{NextStep: 1, Steps: []core.StepMetrics{step(0)}}, []int{0}, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.metrics != "" {
				if err := os.WriteFile(filepath.Join(dir, output.MetricsFile), []byte(tc.metrics), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(dir, output.TrajectoriesFile), []byte(tc.trajs), 0o644); err != nil {
				t.Fatal(err)
			}
			res, err := TrimOutputs(dir, tc.state)
			kept := res.Metrics
			if err != nil {
				t.Fatal(err)
			}
			var got []int
			for _, m := range kept {
				got = append(got, m.Step)
			}
			if !slices.Equal(got, tc.wantSteps) {
				t.Errorf("kept steps %v, want %v", got, tc.wantSteps)
			}
			data, err := os.ReadFile(filepath.Join(dir, output.MetricsFile))
			if err != nil {
				t.Fatal(err)
			}
			var onDisk []int
			for l := range strings.Lines(string(data)) {
				var m core.StepMetrics
				if err := json.Unmarshal([]byte(l), &m); err != nil {
					t.Fatalf("metrics line %q: %v", l, err)
				}
				if m.Extra["train/loss"] != float64(m.Step) {
					t.Errorf("step %d lost its training metrics: %v", m.Step, m.Extra)
				}
				onDisk = append(onDisk, m.Step)
			}
			if !slices.Equal(onDisk, tc.wantSteps) {
				t.Errorf("metrics file has steps %v, want %v", onDisk, tc.wantSteps)
			}
			td, err := os.ReadFile(filepath.Join(dir, output.TrajectoriesFile))
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(string(td), "\n"); n != tc.wantTraj {
				t.Errorf("%d trajectory lines kept, want %d", n, tc.wantTraj)
			}
			if len(res.Ahead) != tc.wantAhead {
				t.Errorf("%d episodes ahead of the checkpoint, want %d", len(res.Ahead), tc.wantAhead)
			}
			for _, a := range res.Ahead {
				if a.Step < tc.state.NextStep || a.FinishReason == core.FinishCancelled {
					t.Errorf("episode of step %d (%s) handed over", a.Step, a.FinishReason)
				}
			}
		})
	}
}
