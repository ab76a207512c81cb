package rundir

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/host/dashboard/fakerun"
)

// fieldsOf is what scanLine must find in t's line, computed from the
// decoded struct.
func fieldsOf(t core.Trajectory) lineFields {
	f := lineFields{runID: t.RunID, taskID: t.TaskID, finish: t.FinishReason, step: t.Step, group: t.Group, index: t.Index,
		reward: t.Reward, durationMS: t.DurationMS, errored: t.Error != "", turns: len(t.Turns),
		passed: t.Metrics["passed"], timeouts: t.Metrics["timeouts"], execs: t.Metrics["sandbox_execs"], execTimeouts: t.Metrics["sandbox_timeouts"]}
	for _, tu := range t.Turns {
		f.promptTokens += tu.Usage.PromptTokens
		f.completionTokens += tu.Usage.CompletionTokens
	}
	return f
}

func sampleTrajectories() []core.Trajectory {
	rng := rand.New(rand.NewPCG(3, 4))
	opt := fakerun.Options{RunID: "r1", Turns: 2, ToolOutput: 300, TokenIDs: 5, Hostile: true}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ts := []core.Trajectory{
		fakerun.Episode(rng, opt, 0, 0, 0, "sort_list", at), // hostile
		fakerun.Episode(rng, opt, 3, 1, 2, `task "quoted" \ back`, at),
		{RunID: "ünï/código", Step: 7, TaskID: "t]{[\"", FinishReason: core.FinishError, Error: "boom", Reward: -1.5e-3},
		{RunID: "r", Step: 1, Metrics: map[string]float64{"passed": 1, "timeouts": 2, "sandbox_execs": 9, "sandbox_timeouts": 1, "x": 3}},
		{RunID: "r", Turns: []core.Turn{{}, {Usage: core.Usage{PromptTokens: 3, CompletionTokens: 4}}, {TokenIDs: []int{}}}},
		{RunID: "r", Messages: []core.Message{{Role: "user", Content: `"reward":99,"step":5,"turns":[{"usage":{"prompt_tokens":1}}]`}}},
		{RunID: "r", Tools: []core.ToolSpec{{Function: core.FunctionSpec{Name: "f", Parameters: json.RawMessage(`{"reward":{"step":3},"a":[[1],[2,[3]],{}],"b":[]}`)}}}},
	}
	return ts
}

// scanLine reads what encoding/json reads from the same line.
func TestScanLineMatchesDecode(t *testing.T) {
	for i, tr := range sampleTrajectories() {
		line, err := json.Marshal(tr)
		if err != nil {
			t.Fatal(err)
		}
		got, err := scanLine(line)
		if err != nil {
			t.Errorf("%d: scanLine: %v\n%s", i, err, line)
			continue
		}
		if want := fieldsOf(tr); got != want {
			t.Errorf("%d: scanLine = %+v\nwant %+v", i, got, want)
		}
	}
}

func TestScanLineRejects(t *testing.T) {
	for _, line := range []string{``, `[]`, `{`, `{"step":}`, `{"step":1`, `{"step":"x"}`, `{"reward":true}`, `{"a":1} x`,
		`{"messages":[{"content":"unterminated}]}`, `{"turns":[{"usage":{"prompt_tokens":1.5}}]}`, `{"a":[1,2}`} {
		if _, err := scanLine([]byte(line)); err == nil {
			t.Errorf("scanLine(%q) accepted", line)
		}
	}
}

// Deep nesting is linear: every '[' would otherwise look ahead to the
// first ']'.
func TestScanLineDeepNesting(t *testing.T) {
	line := `{"tools":` + strings.Repeat("[1,", 200000) + strings.Repeat("]", 200000) + `,"step":4}`
	f, err := scanLine([]byte(line))
	if err != nil || f.step != 4 {
		t.Fatalf("step %d, err %v", f.step, err)
	}
}

func FuzzScanLine(f *testing.F) {
	for _, tr := range sampleTrajectories() {
		line, _ := json.Marshal(tr)
		f.Add(line)
	}
	f.Add([]byte(`{"step":1,"tools":[[[["\\"]]]],"turns":null,"metrics":null}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		scanLine(line) // never panics, whatever the input
		var tr core.Trajectory
		if json.Unmarshal(line, &tr) != nil {
			return
		}
		// On the writer's form of any trajectory, the fields agree.
		canon, err := json.Marshal(tr)
		if err != nil {
			return // NaN and the like cannot be written
		}
		got, err := scanLine(canon)
		if err != nil {
			t.Fatalf("scanLine(%s): %v", canon, err)
		}
		if want := fieldsOf(tr); got != want {
			t.Fatalf("scanLine(%s) = %+v, want %+v", canon, got, want)
		}
	})
}

func TestIndexFold(t *testing.T) {
	for _, tc := range []struct {
		s, sub string
		want   int
	}{
		{"Hello World", "world", 6},
		{"Hello World", "WORLD", 6},
		{"hello", "", 0},
		{"abc", "abcd", -1},
		{"xxQuuxQUUX", "quux", 2},
		{"a\\u003cscript\\u003e", "\\u003cSCRIPT", 1},
		{"Kelvin \u212a", "k", 0},
		{"\u212a", "k", -1}, // only ASCII letters fold
		{"12-34", "-3", 2},
		{"aAaAb", "AAB", 2},
	} {
		if got := indexFold([]byte(tc.s), []byte(tc.sub)); got != tc.want {
			t.Errorf("indexFold(%q, %q) = %d, want %d", tc.s, tc.sub, got, tc.want)
		}
	}
}

func FuzzIndexFold(f *testing.F) {
	f.Add("Hello World", "o w")
	f.Add("zzzZZZ", "zZ")
	f.Fuzz(func(t *testing.T, s, sub string) {
		lowerASCII := func(x string) []byte {
			b := []byte(x)
			for i := range b {
				b[i] = lower(b[i])
			}
			return b
		}
		want := bytes.Index(lowerASCII(s), lowerASCII(sub))
		if got := indexFold([]byte(s), []byte(sub)); got != want {
			t.Fatalf("indexFold(%q, %q) = %d, want %d", s, sub, got, want)
		}
	})
}
