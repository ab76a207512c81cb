package coding

import (
	"strings"
	"testing"
)

func TestParseTasks(t *testing.T) {
	in := `{"id":"a","prompt":"p","func_name":"f","tests":["1"],"reference":"abs"}

{"id":"b","prompt":"q","func_name":"g","banned_patterns":["x"],"tests":["1","2"],"reference":"lambda v: v"}
`
	got, err := parseTasks(strings.NewReader(in))
	if err != nil {
		t.Fatalf("parseTasks: %v", err)
	}
	if len(got) != 2 || got[0].ID != "a" || got[1].FuncName != "g" || len(got[1].Tests) != 2 || got[1].BannedPatterns[0] != "x" {
		t.Fatalf("parseTasks = %+v", got)
	}
	for _, tk := range got {
		if err := tk.check(RewardTests); err != nil {
			t.Errorf("task %s: %v", tk.ID, err)
		}
	}
}

func TestParseTasksErrors(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"not json", "{\"id\":\"a\"}\nnope\n", "line 2"},
		{"unknown field", `{"id":"a","colour":"red"}`, "line 1"},
		{"two values", `{"id":"a"} {"id":"b"}`, "trailing data"},
		{"wrong type", `{"id":"a","tests":"1"}`, "line 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseTasks(strings.NewReader(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("parseTasks error = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestTaskCheck(t *testing.T) {
	good := taskConfig{ID: "a", Prompt: "p", FuncName: "f_1", Tests: []string{"1"}, Reference: "abs"}
	tests := []struct {
		name   string
		edit   func(*taskConfig)
		reward string
		want   string // "" = valid
	}{
		{"valid", func(*taskConfig) {}, RewardTests, ""},
		{"no id", func(t *taskConfig) { t.ID = " " }, RewardTests, "id is empty"},
		{"no prompt", func(t *taskConfig) { t.Prompt = "" }, RewardTests, "prompt is empty"},
		{"bad func name", func(t *taskConfig) { t.FuncName = "1f" }, RewardTests, "not a Python identifier"},
		{"func name injection", func(t *taskConfig) { t.FuncName = "f; import os" }, RewardTests, "not a Python identifier"},
		{"empty banned", func(t *taskConfig) { t.BannedPatterns = []string{""} }, RewardTests, "banned_patterns[0]"},
		{"no tests", func(t *taskConfig) { t.Tests = nil }, RewardTests, "no tests"},
		{"no reference", func(t *taskConfig) { t.Reference = "" }, RewardTests, "no reference"},
		{"exec needs neither", func(t *taskConfig) { t.Tests, t.Reference = nil, "" }, RewardExec, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			task := good
			tc.edit(&task)
			err := task.check(tc.reward)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("check: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("check error = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestBuiltinTasksValid(t *testing.T) {
	ids := map[string]bool{}
	for _, tk := range builtinTasks() {
		if err := tk.check(RewardTests); err != nil {
			t.Errorf("builtin task %s: %v", tk.ID, err)
		}
		ids[tk.ID] = true
	}
	if !ids[TaskSortList] || !ids[TaskMaxSubarray] || len(ids) != 2 {
		t.Errorf("builtin task ids = %v", ids)
	}
}

// FuzzParseTasks checks that any input either parses into tasks or returns
// an error naming a line, without panicking.
func FuzzParseTasks(f *testing.F) {
	f.Add(`{"id":"a","prompt":"p","func_name":"f","tests":["1"],"reference":"abs"}`)
	f.Add("\n\n{}\n")
	f.Add(`{"id":1}`)
	f.Fuzz(func(t *testing.T, in string) {
		tasks, err := parseTasks(strings.NewReader(in))
		if err != nil {
			if !strings.Contains(err.Error(), "line ") && !strings.Contains(err.Error(), "read tasks") {
				t.Fatalf("error %q names no line", err)
			}
			return
		}
		if len(tasks) > strings.Count(in, "\n")+1 {
			t.Fatalf("%d tasks from %d lines", len(tasks), strings.Count(in, "\n")+1)
		}
	})
}
