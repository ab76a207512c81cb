package output

import (
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/rlhost/rlhost/core"
)

// benchTraj is a mid-sized multi-turn episode (~8 KiB of JSON).
func benchTraj() core.Trajectory {
	t := traj(0, 0, strings.Repeat("def add(a, b): return a + b\n", 40))
	for range 6 {
		t.Messages = append(t.Messages,
			core.Message{Role: core.RoleAssistant, ToolCalls: []core.ToolCall{{ID: "c", Type: "function",
				Function: core.FunctionCall{Name: "run_python", Arguments: `{"code":"print(add(1, 2))"}`}}}},
			core.Message{Role: core.RoleTool, ToolCallID: "c", Content: strings.Repeat("3\n", 100)})
	}
	return t
}

// BenchmarkMarshalTrajectory is the baseline for BenchmarkWriteTrajectory:
// encoding alone, no file.
func BenchmarkMarshalTrajectory(b *testing.B) {
	t := benchTraj()
	for b.Loop() {
		data, err := json.Marshal(t)
		if err != nil {
			b.Fatal(err)
		}
		io.Discard.Write(append(data, '\n'))
	}
}

// BenchmarkWriteTrajectory appends to trajectories.jsonl (no fsync; that
// happens once per step in WriteStep).
func BenchmarkWriteTrajectory(b *testing.B) {
	w, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	t := benchTraj()
	for b.Loop() {
		if err := w.WriteTrajectory(t); err != nil {
			b.Fatal(err)
		}
	}
}
