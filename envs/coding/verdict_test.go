package coding

import (
	"strings"
	"testing"
	"time"
)

func TestParseVerdict(t *testing.T) {
	const nonce = "abc123"
	tests := []struct {
		name, stdout, wantErr, wantStage string
	}{
		{"found among noise", "hello\nabc123 {\"stage\":\"tests\",\"results\":[]}\nbye", "", stageTests},
		{"missing", "abc12 {\"stage\":\"tests\"}\n", "no verdict", ""},
		{"forged twice", "abc123 {\"stage\":\"tests\"}\nabc123 {\"stage\":\"tests\"}\n", "2 verdict lines", ""},
		{"not at line start", "x abc123 {\"stage\":\"tests\"}\n", "no verdict", ""},
		{"bad json", "abc123 {\"stage\":\n", "decode verdict", ""},
		{"unknown stage", "abc123 {\"stage\":\"won\"}\n", "unknown stage", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := parseVerdict(tc.stdout, nonce)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseVerdict error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || v.Stage != tc.wantStage {
				t.Fatalf("parseVerdict = %+v, %v", v, err)
			}
		})
	}
}

func FuzzParseVerdict(f *testing.F) {
	f.Add("n {\"stage\":\"tests\",\"results\":[{\"status\":\"ok\",\"value\":[\"int\",\"1\"]}]}\n")
	f.Add("n {\"stage\":\"syntax\",\"error\":\"x\"}")
	f.Add("junk\nn \n")
	f.Fuzz(func(t *testing.T, stdout string) {
		v, err := parseVerdict(stdout, "n")
		if err != nil {
			return
		}
		if v.Stage != stageSyntax && v.Stage != stageLoad && v.Stage != stageTests {
			t.Fatalf("accepted stage %q", v.Stage)
		}
		// Whatever the results claim, scoring them must not panic and must
		// stay within [-1, 1].
		o := newOutcome(taskConfig{Tests: []string{"1", "2"}})
		want := []value{{kind: "int", text: "1"}, {kind: "int", text: "2"}}
		applyVerdict(o, settings{onException: OnExceptionFail}, want, v)
		if o.reward < -1 || o.reward > 1 {
			t.Fatalf("reward %v out of range", o.reward)
		}
	})
}

func TestApplyVerdict(t *testing.T) {
	want := []value{{kind: "int", text: "1"}, {kind: "int", text: "2"}, {kind: "int", text: "3"}}
	ok := func(n string) testResult { return testResult{Status: statusOK, Value: []byte(`["int","` + n + `"]`)} }
	tests := []struct {
		name        string
		onException string
		v           verdict
		wantReward  float64
		wantFlag    string
		wantPassed  float64
		wantFinish  string
	}{
		{"all pass", OnExceptionPenalty, verdict{Stage: stageTests, Results: []testResult{ok("1"), ok("2"), ok("3")}}, 1, "", 3, "done"},
		{"two of three", OnExceptionPenalty, verdict{Stage: stageTests, Results: []testResult{ok("1"), ok("5"), ok("3")}}, 2.0 / 3, "", 2, "done"},
		{"float equals int", OnExceptionPenalty, verdict{Stage: stageTests, Results: []testResult{
			{Status: statusOK, Value: []byte(`["float","1.0"]`)}, ok("0"), ok("0")}}, 1.0 / 3, "", 1, "done"},
		{"unsupported never passes", OnExceptionPenalty, verdict{Stage: stageTests, Results: []testResult{
			{Status: statusOK, Value: []byte(`["unsupported","A"]`)}, ok("2"), ok("3")}}, 2.0 / 3, "", 2, "done"},
		{"malformed value fails", OnExceptionPenalty, verdict{Stage: stageTests, Results: []testResult{
			{Status: statusOK, Value: []byte(`1`)}, ok("2"), ok("3")}}, 2.0 / 3, "", 2, "done"},
		{"syntax", OnExceptionPenalty, verdict{Stage: stageSyntax, Error: "SyntaxError"}, -1, "syntax_error", 0, "done"},
		{"load error", OnExceptionPenalty, verdict{Stage: stageLoad, Status: statusError}, -1, "load_error", 0, "done"},
		{"load crash", OnExceptionPenalty, verdict{Stage: stageLoad, Status: statusCrash}, -1, "load_error", 0, "done"},
		{"load timeout", OnExceptionPenalty, verdict{Stage: stageLoad, Status: statusTimeout}, -1, "timeout", 0, "timeout"},
		{"test timeout", OnExceptionFail, verdict{Stage: stageTests, Results: []testResult{ok("1"), {Status: statusTimeout}, {Status: statusNotRun}}}, -1, "timeout", 1, "timeout"},
		{"exception penalized", OnExceptionPenalty, verdict{Stage: stageTests, Results: []testResult{ok("1"), {Status: statusError, Error: "ZeroDivisionError"}, ok("3")}}, -1, "exception", 2, "done"},
		{"crash penalized", OnExceptionPenalty, verdict{Stage: stageTests, Results: []testResult{ok("1"), {Status: statusCrash}, {Status: statusNotRun}}}, -1, "exception", 1, "done"},
		{"exception fails one test", OnExceptionFail, verdict{Stage: stageTests, Results: []testResult{ok("1"), {Status: statusError}, ok("3")}}, 2.0 / 3, "exception", 2, "done"},
		{"too large fails", OnExceptionPenalty, verdict{Stage: stageTests, Results: []testResult{ok("1"), {Status: statusTooLarge}, {Status: statusNotRun}}}, 1.0 / 3, "", 1, "done"},
		{"missing results fail", OnExceptionPenalty, verdict{Stage: stageTests, Results: []testResult{ok("1")}}, 1.0 / 3, "", 1, "done"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := newOutcome(taskConfig{Tests: []string{"a", "b", "c"}})
			applyVerdict(o, settings{onException: tc.onException}, want, tc.v)
			if diff := o.reward - tc.wantReward; diff > 1e-12 || diff < -1e-12 {
				t.Errorf("reward = %v, want %v", o.reward, tc.wantReward)
			}
			if tc.wantFlag != "" && o.metrics[tc.wantFlag] != 1 {
				t.Errorf("metric %s not set: %v", tc.wantFlag, o.metrics)
			}
			if o.metrics["tests_passed"] != tc.wantPassed || o.metrics["tests_total"] != 3 {
				t.Errorf("tests_passed/total = %v/%v, want %v/3", o.metrics["tests_passed"], o.metrics["tests_total"], tc.wantPassed)
			}
			if o.finish != tc.wantFinish {
				t.Errorf("finish = %q, want %q", o.finish, tc.wantFinish)
			}
		})
	}
}

// The exec's backstop leaves the runner at least 2 s, and as long again as
// the candidate's budget when that is longer.
func TestRunnerGrace(t *testing.T) {
	for _, tc := range []struct{ in, want time.Duration }{
		{time.Second, 2 * time.Second},
		{100 * time.Millisecond, 2 * time.Second},
		{10 * time.Second, 10 * time.Second},
	} {
		if got := runnerGrace(tc.in); got != tc.want {
			t.Errorf("runnerGrace(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
