package coding

import (
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/rlhost/rlhost/core/jsonl"
)

// Built-in task ids, used by the replay file in examples/coding.
const (
	TaskSortList    = "sort_list"
	TaskMaxSubarray = "max_subarray"
)

// builtinTasks are the two tasks of the seed workflow.
func builtinTasks() []taskConfig {
	return []taskConfig{
		{
			ID: TaskSortList,
			Prompt: "Write a Python function `sort_list(xs)` that takes a list of integers and returns a new list " +
				"with the same integers in ascending order.\n" +
				"Do not use any built-in or library sorting: no `sorted(`, no `.sort(`, no `heapq`, no `bisect`.\n" +
				"Answer with the function in a ```python code block.",
			FuncName:       "sort_list",
			BannedPatterns: []string{"sorted(", ".sort(", "heapq", "bisect", "numpy", "pandas"},
			Tests: []string{
				"[]", "[1]", "[3, 1, 2]", "[5, -2, 5, 0, -7, 3]", "[10, 9, 8, 7, 6, 5, 4, 3, 2, 1]",
				"[2, 2, 2, 1]", "list(range(50, 0, -3))", "[-1, -100, 42, 7, 7, 0, 13, -5]",
			},
			Reference: "sorted",
		},
		{
			ID: TaskMaxSubarray,
			Prompt: "Write a Python function `max_subarray(nums)` that takes a non-empty list of integers and returns " +
				"the largest sum of any non-empty contiguous subarray.\n" +
				"Answer with the function in a ```python code block.",
			FuncName: "max_subarray",
			Tests: []string{
				"[1]", "[-1]", "[-2, 1, -3, 4, -1, 2, 1, -5, 4]", "[5, 4, -1, 7, 8]", "[-3, -2, -5]",
				"[0, 0, 0]", "[2, -1, 2, -1, 2]", "[1, -2, 3, 10, -4, 7, 2, -5]", "list(range(-5, 6))",
			},
			// Brute force on purpose: obviously correct, and the tests are small.
			Reference: "def max_subarray(nums):\n" +
				"    return max(sum(nums[i:j]) for i in range(len(nums)) for j in range(i + 1, len(nums) + 1))\n",
		},
	}
}

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// check reports what is wrong with a task, or nil. Tests need a reference
// only in the tests reward mode, where they are scored.
func (t taskConfig) check(reward string) error {
	var problems []string
	if strings.TrimSpace(t.ID) == "" {
		problems = append(problems, "id is empty")
	}
	if strings.TrimSpace(t.Prompt) == "" {
		problems = append(problems, "prompt is empty")
	}
	if !identifier.MatchString(t.FuncName) {
		problems = append(problems, fmt.Sprintf("func_name %q is not a Python identifier", t.FuncName))
	}
	for i, p := range t.BannedPatterns {
		if p == "" {
			problems = append(problems, fmt.Sprintf("banned_patterns[%d] is empty", i))
		}
	}
	if reward == RewardTests {
		if len(t.Tests) == 0 {
			problems = append(problems, "no tests")
		}
		if strings.TrimSpace(t.Reference) == "" {
			problems = append(problems, "no reference")
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return errors.New(strings.Join(problems, "; "))
}

// maxTaskLine bounds one JSONL line; tasks are small, and a bound keeps a
// wrong file (a binary, a huge dump) from being read whole into memory.
const maxTaskLine = 4 << 20

// parseTasks reads tasks in JSONL form, one object per line; blank lines are
// skipped. Errors name the line.
func parseTasks(r io.Reader) ([]taskConfig, error) {
	var out []taskConfig
	err := jsonl.Each(r, "", maxTaskLine, func(_ int, line []byte) error {
		var t taskConfig
		if err := jsonl.DecodeStrict(line, &t); err != nil {
			return err
		}
		out = append(out, t)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read tasks: %w", err)
	}
	return out, nil
}
