package cliflag

import (
	"bytes"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		done     bool
		code     int
		stdout   string // substring; "" means empty
		stderr   []string
		noStderr bool
	}{
		{name: "ok", args: []string{"--steps", "2", "file"}, noStderr: true},
		{name: "help", args: []string{"--help"}, done: true, code: 0, stdout: "Usage: rlhost run", noStderr: true},
		{name: "typo", args: []string{"file", "--stesp", "2"}, done: true, code: 2,
			stderr: []string{"rlhost run: unknown flag: --stesp", "did you mean --steps?", "Run 'rlhost run --help' for usage."}},
		{name: "far", args: []string{"--bogus"}, done: true, code: 2,
			stderr: []string{"rlhost run: unknown flag: --bogus", "Run 'rlhost run --help'"}},
		{name: "shorthand", args: []string{"-z"}, done: true, code: 2,
			stderr: []string{"unknown shorthand flag: 'z'", "--help"}},
		{name: "bad value", args: []string{"--steps", "two"}, done: true, code: 2,
			stderr: []string{`invalid argument "two" for "--steps"`, "--help"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			fs := New("rlhost run", "Usage: rlhost run FILE.hcl [flags]\n", &stdout, &stderr)
			fs.Int("steps", 0, "override run.steps")
			fs.Bool("dry-run", false, "no training")
			done, code := Parse(fs, tc.args)
			if done != tc.done || code != tc.code {
				t.Fatalf("Parse = %v, %d; want %v, %d (stderr %q)", done, code, tc.done, tc.code, stderr.String())
			}
			if tc.stdout == "" && stdout.Len() > 0 || !strings.Contains(stdout.String(), tc.stdout) {
				t.Errorf("stdout = %q, want it to contain %q", stdout.String(), tc.stdout)
			}
			if tc.stdout != "" && !strings.Contains(stdout.String(), "--steps") {
				t.Errorf("help lacks the flags: %q", stdout.String())
			}
			if tc.noStderr && stderr.Len() > 0 {
				t.Errorf("stderr = %q, want nothing", stderr.String())
			}
			for _, want := range tc.stderr {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr = %q, want it to contain %q", stderr.String(), want)
				}
			}
		})
	}
}
