package main

import (
	"bytes"
	"strings"
	"testing"
)

// runCLI runs the command line in-process and returns its exit code and
// streams.
func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// Every command explains a bad flag on stderr, suggests a close one, and
// points at its --help; nothing goes to stdout.
func TestFlagErrorsAreExplained(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"run", "examples/coding.hcl", "--stesp", "2"}, []string{"rlhost run: unknown flag: --stesp", "did you mean --steps?", "Run 'rlhost run --help' for usage."}},
		{[]string{"validate", "--bogus"}, []string{"rlhost validate: unknown flag: --bogus", "Run 'rlhost validate --help'"}},
		{[]string{"plugins", "--bogus"}, []string{"rlhost plugins: unknown flag: --bogus", "Run 'rlhost plugins --help'"}},
		{[]string{"plugins", "--jsn"}, []string{"did you mean --json?"}},
		{[]string{"sandbox", "exec", "--bogus"}, []string{"rlhost sandbox exec: unknown flag: --bogus", "Run 'rlhost sandbox exec --help'"}},
		{[]string{"sandbox", "list", "--lable", "a=b"}, []string{"did you mean --label?"}},
		{[]string{"sandbox", "rm", "--orphan"}, []string{"did you mean --orphans?"}},
		{[]string{"tokenize", "--bogus"}, []string{"rlhost tokenize: unknown flag: --bogus", "--help"}},
		{[]string{"model", "init", "--bogus"}, []string{"rlhost model init: unknown flag: --bogus", "--help"}},
		{[]string{"run", "x.hcl", "--steps", "two"}, []string{`invalid argument "two"`, "Run 'rlhost run --help'"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errs := runCLI(tc.args...)
			if code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if out != "" {
				t.Errorf("stdout %q, want nothing", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(errs, w) {
					t.Errorf("stderr %q lacks %q", errs, w)
				}
			}
		})
	}
}

// Help that was asked for is the command's output: stdout, exit 0.
func TestRequestedHelpGoesToStdout(t *testing.T) {
	for _, args := range [][]string{
		{"--help"}, {"run", "--help"}, {"validate", "--help"}, {"plugins", "--help"},
		{"sandbox", "--help"}, {"sandbox", "exec", "--help"}, {"sandbox", "list", "--help"}, {"sandbox", "rm", "--help"},
		{"model", "--help"}, {"model", "generate", "--help"}, {"tokenize", "--help"}, {"version", "--help"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, out, errs := runCLI(args...)
			if code != 0 || !strings.Contains(out, "Usage") || errs != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want 0, usage on stdout only", code, out, errs)
			}
		})
	}
	code, out, _ := runCLI("run", "--help")
	if code != 0 || !strings.Contains(out, "--dry-run") {
		t.Errorf("run --help does not list the flags: %q", out)
	}
	// --append does not resume a run, and says so.
	if !strings.Contains(out, "a new run id") || !strings.Contains(out, "--resume continues") {
		t.Errorf("run --help does not say that --append starts over: %q", out)
	}
}

func TestUnknownCommandSuggests(t *testing.T) {
	code, out, errs := runCLI("valdiate", "job.hcl")
	if code != 2 || out != "" || !strings.Contains(errs, `unknown command "valdiate"; did you mean "validate"?`) {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
}
