package aviato

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runScript runs the exec script with this machine's /bin/sh, as the
// service would inside the sandbox.
func runScript(t *testing.T, s execScript, argv []string) (string, string, int) {
	t.Helper()
	cmdv := s.command(argv)
	cmd := exec.Command(cmdv[0], cmdv[1:]...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// FuzzExecScript: whatever the argv, env values, directory name and stdin,
// the program receives them byte for byte.
func FuzzExecScript(f *testing.F) {
	f.Add("a b", "it's \"quoted\" $HOME `x` \\", "dir with 'quote'", []byte("in\x00put\xff"))
	f.Add("", "", "d", []byte{})
	f.Add("--", "\n\t", "-dash", []byte("\n"))
	f.Fuzz(func(t *testing.T, arg, val, dirName string, stdin []byte) {
		if strings.ContainsAny(arg+val+dirName, "\x00") || dirName == "" || strings.ContainsAny(dirName, "/") || dirName == "." || dirName == ".." {
			return
		}
		dir := filepath.Join(t.TempDir(), dirName)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return
		}
		s := execScript{dir: dir, env: map[string]string{"V": val}, stdin: stdin, cap: 1 << 20}
		argv := []string{"/bin/sh", "-c", `printf '%s|' "$@"; printf '%s|' "$V" "$(pwd)"; cat`, "sh", arg}
		out, _, code := runScript(t, s, argv)
		want := arg + "|" + val + "|" + dir + "|" + string(stdin)
		if code != 0 || out != want {
			t.Errorf("got %q (exit %d), want %q", out, code, want)
		}
	})
}

func TestExecScriptCapsAndStatus(t *testing.T) {
	dir := t.TempDir()
	stdinPath := filepath.Join(dir, "stdin")
	if err := os.WriteFile(stdinPath, []byte("from file"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stdinPath+"2", []byte("second"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		s        execScript
		argv     []string
		out, err string
		code     int
	}{
		{"cut after cap+1, rest drained", execScript{dir: dir, cap: 4}, []string{"/bin/sh", "-c", "head -c 100000 /dev/zero | tr '\\0' o; head -c 100000 /dev/zero | tr '\\0' e >&2; exit 9"}, "ooooo", "eeeee", 9},
		{"stdin file read and removed", execScript{dir: dir, cap: 100, stdinFile: stdinPath}, []string{"cat"}, "from file", "", 0},
		// Gone from the disk before the program runs, and no fd 3 left.
		{"stdin file not on disk while it runs", execScript{dir: dir, cap: 100, stdinFile: stdinPath + "2"},
			[]string{"/bin/sh", "-c", `ls "$0" 2>/dev/null; [ -e /dev/fd/3 ] && echo fd3; cat`, stdinPath + "2"}, "second", "", 0},
		{"no stdin is empty", execScript{dir: dir, cap: 100}, []string{"cat"}, "", "", 0},
		{"missing dir", execScript{dir: filepath.Join(dir, "nope"), cap: 100}, []string{"true"}, "", "", 125},
		{"killed by signal", execScript{dir: dir, cap: 100}, []string{"/bin/sh", "-c", "kill -KILL $$"}, "", "", 137},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, errs, code := runScript(t, tc.s, tc.argv)
			if out != tc.out || code != tc.code || (tc.code != 125 && errs != tc.err) {
				t.Errorf("got %q %q exit %d, want %q %q exit %d", out, errs, code, tc.out, tc.err, tc.code)
			}
		})
	}
	for _, p := range []string{stdinPath, stdinPath + "2"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("uploaded stdin not removed: %v", err)
		}
	}
}
