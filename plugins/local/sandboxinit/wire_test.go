package sandboxinit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
)

func TestErrKindRoundTrip(t *testing.T) {
	for _, e := range []error{core.ErrNotFound, core.ErrInvalidPath, core.ErrTooLarge} {
		back := KindErr(ErrKind(e), "x")
		if !errors.Is(back, e) {
			t.Errorf("%v did not survive the wire: %v", e, back)
		}
	}
}

// Run with DirectStarter is what isolation = "none" uses; the init uses the
// same runner with its own starter.
func TestRunDirect(t *testing.T) {
	ctx := context.Background()
	run := func(s ExecSpec) core.ExecResult {
		t.Helper()
		if s.Dir == "" {
			s.Dir = t.TempDir()
		}
		r, err := Run(ctx, s, DirectStarter{}, "none", nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	sh := func(script string) []string { return []string{"/bin/sh", "-c", script} }
	cases := []struct {
		name  string
		spec  ExecSpec
		check func(core.ExecResult) bool
	}{
		{"exit code", ExecSpec{Argv: sh("exit 3"), MaxOutput: 10}, func(r core.ExecResult) bool { return r.ExitCode == 3 }},
		{"env only as given", ExecSpec{Argv: sh("echo $A:$HOME"), Env: []string{"A=1"}, MaxOutput: 100}, func(r core.ExecResult) bool { return r.Stdout == "1:\n" }},
		{"stdin", ExecSpec{Argv: []string{"cat"}, Stdin: []byte("in"), MaxOutput: 100}, func(r core.ExecResult) bool { return r.Stdout == "in" }},
		{"cap", ExecSpec{Argv: sh("head -c 100000 /dev/zero"), MaxOutput: 10}, func(r core.ExecResult) bool { return len(r.Stdout) == 10 && r.OutputTruncated }},
		{"timeout", ExecSpec{Argv: sh("sleep 10"), Timeout: 50 * time.Millisecond, MaxOutput: 10}, func(r core.ExecResult) bool { return r.TimedOut && r.Signal == "SIGKILL" }},
		{"not found", ExecSpec{Argv: []string{"no-such-cmd-rlhost"}, MaxOutput: 100}, func(r core.ExecResult) bool {
			return r.ExitCode == 127 && strings.Contains(r.Stderr, "not found")
		}},
		{"binary", ExecSpec{Argv: sh(`printf '\377\000'`), MaxOutput: 10}, func(r core.ExecResult) bool { return r.Stdout == "\xff\x00" }},
	}
	for _, c := range cases {
		if r := run(c.spec); !c.check(r) {
			t.Errorf("%s: %+v", c.name, r)
		}
	}
}
