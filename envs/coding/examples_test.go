package coding

import (
	"bufio"
	"encoding/json"
	"os"
	"testing"
)

// TestReplayExamples scores examples/coding/completions.jsonl, the replay
// file of the default demo, and checks that it shows the spread of rewards
// it is meant to show on each built-in task.
func TestReplayExamples(t *testing.T) {
	f, err := os.Open("../../examples/coding/completions.jsonl")
	if err != nil {
		t.Fatalf("open replay file: %v", err)
	}
	defer f.Close()
	h := newHarness(t, map[string]any{"timeout": "5s"})
	want := map[string]struct{ pass, partial, penalty int }{
		TaskSortList:    {2, 1, 4},
		TaskMaxSubarray: {2, 2, 3},
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	seen := map[string]bool{}
	for sc.Scan() {
		var line struct {
			TaskID      string   `json:"task_id"`
			Completions []string `json:"completions"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("replay line: %v", err)
		}
		w, ok := want[line.TaskID]
		if !ok {
			t.Fatalf("replay file names task %q, not a built-in task", line.TaskID)
		}
		seen[line.TaskID] = true
		var pass, partial, penalty int
		for _, c := range line.Completions {
			obs := h.run(t, line.TaskID, c)
			switch {
			case obs.Reward == 1:
				pass++
			case obs.Reward == Penalty:
				penalty++
			case obs.Reward > 0 && obs.Reward < 1:
				partial++
			}
			t.Logf("%s: reward %.3f metrics %v info %q", line.TaskID, obs.Reward, obs.Metrics, obs.Info["error"])
		}
		if pass != w.pass || partial != w.partial || penalty != w.penalty {
			t.Errorf("%s: %d pass, %d partial, %d penalized; want %d, %d, %d",
				line.TaskID, pass, partial, penalty, w.pass, w.partial, w.penalty)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(seen) != len(want) {
		t.Errorf("replay file covers %v, want every built-in task", seen)
	}
}

// TestExampleTasksFile loads examples/coding/tasks.jsonl and checks every
// task against its own reference, which is written as a full solution.
func TestExampleTasksFile(t *testing.T) {
	h := newHarness(t, map[string]any{"timeout": "5s", "tasks": mustAbs(t, "../../examples/coding/tasks.jsonl")})
	if len(h.tasks) < 3 {
		t.Fatalf("only %d example tasks", len(h.tasks))
	}
	f, err := os.Open("../../examples/coding/tasks.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tasks, err := parseTasks(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range tasks {
		id := tc.ID
		if _, ok := h.tasks[id]; !ok {
			t.Fatalf("task %s not offered by the env", id)
		}
		obs := h.run(t, id, fenced(tc.Reference))
		if obs.Reward != 1 {
			t.Errorf("task %s: its reference scores %v (%v, %v)", id, obs.Reward, obs.Metrics, obs.Info)
		}
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd + "/" + p
}
