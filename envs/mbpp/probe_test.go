package mbpp

import (
	"strings"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
)

// A probe killed before it answered is reported as a slow sandbox, not as
// a missing interpreter; a real miss still names the interpreter.
func TestProbeLines(t *testing.T) {
	cfg := &config{Python: "python3", testTimeout: 10 * time.Second}
	for _, tc := range []struct {
		name string
		res  core.ExecResult
		want string // "" for no error
	}{
		{"found", core.ExecResult{Stdout: "/usr/bin/python3\n/workspace\n"}, ""},
		{"missing", core.ExecResult{ExitCode: 127}, `has no usable "python3"`},
		{"half an answer", core.ExecResult{Stdout: "/usr/bin/python3\n"}, `has no usable "python3"`},
		{"timed out", core.ExecResult{ExitCode: 137, TimedOut: true}, "did not finish looking for \"python3\" within test_timeout (10s)"},
		{"killed", core.ExecResult{ExitCode: 137}, "overloaded"},
		{"signalled", core.ExecResult{ExitCode: -1, Signal: "KILL"}, "signal KILL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines, err := probeLines("sb-1", tc.res, cfg)
			if tc.want == "" {
				if err != nil || len(lines) != 2 {
					t.Fatalf("%v, %v", lines, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to say %q", err, tc.want)
			}
		})
	}
}
