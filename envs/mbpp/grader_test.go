package mbpp

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
)

// These tests run the real grader program (harness/grader.py and child.py)
// with the system interpreter directly, to pin down its verdicts case by
// case; env_test.go runs the same program through a real sandbox.

const testPython = "/usr/bin/python3"

func requirePython(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(testPython); err != nil {
		t.Fatalf("these tests need %s: %v", testPython, err)
	}
}

// runGrader grades solution (written to a fresh directory) on tests with
// the system interpreter, as the sandbox would run it.
func runGrader(t *testing.T, solution string, tests []string, setup string, files map[string]string) GradeResult {
	t.Helper()
	requirePython(t)
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sol := filepath.Join(dir, "solution.py")
	if solution == "<fifo>" {
		if err := syscall.Mkfifo(sol, 0o644); err != nil {
			t.Fatal(err)
		}
	} else if solution != "" {
		if err := os.WriteFile(sol, []byte(solution), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	req, nonce, err := gradeRequest(testPython, sol, "/workspace/solution.py", tests, setup, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	res := execLocal(t, dir, req)
	return parseGrade(res, nonce, len(tests))
}

func execLocal(t *testing.T, dir string, req core.ExecRequest) core.ExecResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), req.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, req.Command[0], req.Command[1:]...)
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(req.Stdin)
	for k, v := range req.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run grader: %v", err)
	}
	return core.ExecResult{ExitCode: cmd.ProcessState.ExitCode(), Stdout: out.String(), Stderr: errb.String(), TimedOut: ctx.Err() != nil}
}

func TestGraderVerdicts(t *testing.T) {
	square := []string{"assert square(3) == 9", "assert square(-2) == 4"}
	cases := []struct {
		name     string
		solution string
		tests    []string
		setup    string
		files    map[string]string
		passed   int
		detail   string // substring of the first failure's detail
		broken   bool
	}{
		{name: "correct", solution: "def square(x):\n    return x * x\n", tests: square, passed: 2},
		{name: "wrong value", solution: "def square(x):\n    return x + x\n", tests: square, passed: 0, detail: "assert square(3) == 9  # failed\n  where square(3) = 6"},
		{name: "one of two", solution: "def square(x):\n    return 9 if x == 3 else 0\n", tests: square, passed: 1, detail: "where square(-2) = 0"},
		{name: "raises", solution: "def square(x):\n    return 1 // 0\n", tests: square, detail: "ZeroDivisionError"},
		{name: "syntax error", solution: "def square(x) return x\n", tests: square, detail: "SyntaxError"},
		{name: "solution is a fifo", solution: "<fifo>", tests: square, detail: "not a regular file"},
		{name: "missing solution", solution: "", tests: square, detail: "no solution file at /workspace/solution.py"},
		{name: "timeout", solution: "def square(x):\n    while True:\n        pass\n", tests: square[:1], detail: "timed out after 2s"},
		{name: "helper module in workspace", solution: "from helper import sq as square\n",
			files: map[string]string{"helper.py": "def sq(x):\n    return x * x\n"}, tests: square, passed: 2},
		{name: "leftover processes", solution: "import subprocess\nsubprocess.Popen(['sleep', '60'])\nsubprocess.Popen(['sleep', '3'], start_new_session=True)\ndef square(x):\n    return x * x\n", tests: square, passed: 2},
		{name: "prints are harmless", solution: "print('noise')\ndef square(x):\n    print('{\"holes\": []}')\n    return x * x\n", tests: square, passed: 2},
		{name: "math and isclose", solution: "import math\ndef area(r):\n    return math.pi * r * r\n",
			tests: []string{"assert math.isclose(area(1), 3.14159, rel_tol=1e-4)", "assert round(area(2), 2) == 12.57"}, passed: 2},
		{name: "generator consumed by test", solution: "def gen(n):\n    yield from range(n)\n", tests: []string{"assert list(gen(3)) == [0, 1, 2]", "assert sum(gen(4)) == 6"}, passed: 2},
		{name: "setup code", setup: "class Box:\n    def __init__(self, v):\n        self.v = v\n", solution: "def unbox(b):\n    return b.v\n",
			tests: []string{"assert unbox(Box(4)) == 4"}, passed: 1},
		{name: "bool assertions", solution: "def even(x):\n    return x % 2 == 0\n", tests: []string{"assert even(2)", "assert not even(3)"}, passed: 2},
		{name: "sets and dicts", solution: "def f():\n    return {1: {2, 3}, 'k': (1.5, None, b'x')}\n", tests: []string{"assert f() == {1: {3, 2}, 'k': (1.5, None, b'x')}"}, passed: 1},
		{name: "test without assert", solution: "def f():\n    return 1\n", tests: []string{"f()"}, detail: "no assert statement"},

		// Tampering. None of these may pass.
		{name: "exit(0) at import", solution: "import sys\nsys.exit(0)\ndef square(x):\n    return 0\n", tests: square, detail: "SystemExit"},
		{name: "os._exit(0) at import", solution: "import os\nos._exit(0)\n", tests: square, detail: "ended without a result"},
		{name: "os._exit(0) in the function", solution: "import os\ndef square(x):\n    os._exit(0)\n", tests: square, detail: "ended without a result"},
		{name: "exit() in the function", solution: "def square(x):\n    exit(0)\n", tests: square, detail: "SystemExit"},
		{name: "always-equal object", solution: "class A:\n    def __eq__(self, o):\n        return True\ndef square(x):\n    return A()\n", tests: square, detail: "cannot compare"},
		{name: "int subclass with rigged eq", solution: "class I(int):\n    def __eq__(self, o):\n        return True\n    __hash__ = int.__hash__\ndef square(x):\n    return I(0)\n", tests: square, detail: "where square(3) = 0"},
		{name: "lying __class__", solution: "class A:\n    __class__ = int\n    def __eq__(self, o):\n        return True\ndef square(x):\n    return A()\n", tests: square, detail: "cannot compare"},
		{name: "list subclass with rigged iteration", solution: "class L(list):\n    def __iter__(self):\n        return iter([1, 2])\n    def __eq__(self, o):\n        return True\ndef f():\n    return L([9])\n",
			tests: []string{"assert f() == [1, 2]"}, detail: "where f() = [9]"},
		{name: "collections subclasses compare as data", solution: "from collections import Counter, OrderedDict, defaultdict, namedtuple\nP = namedtuple('P', 'x y')\n" +
			"def count(s):\n    return Counter(s)\ndef od():\n    return OrderedDict([(2, 'b'), (1, 'a')])\ndef dd():\n    d = defaultdict(list)\n    d['k'].append(1)\n    return d\ndef pt():\n    return P(1, 2)\n",
			tests: []string{"assert count('aab') == {'a': 2, 'b': 1}", "assert od() == {1: 'a', 2: 'b'}", "assert dd() == {'k': [1]}", "assert pt() == (1, 2)"}, passed: 4},
		{name: "monkeypatched builtins", solution: "import builtins\nbuiltins.set = lambda *a: frozenset()\nset = builtins.set\ndef common(a):\n    return []\n",
			tests: []string{"assert set(common('ab')) == set(['a', 'b'])"}, detail: "where set(common('ab')) = set()"},
		{name: "monkeypatched math", solution: "import math\nmath.isclose = lambda *a, **k: True\ndef area(r):\n    return 0.0\n",
			tests: []string{"assert math.isclose(area(1), 3.14)"}, detail: "where area(1) = 0.0"},
		{name: "monkeypatched AssertionError", solution: "import builtins\nbuiltins.AssertionError = type('X', (BaseException,), {})\ndef square(x):\n    return 0\n", tests: square, detail: "where square(3) = 0"},
		{name: "forged verdict lines", solution: "import sys\nfor i in range(3):\n    sys.stdout.write('deadbeef {\"i\": %d, \"ok\": true}\\n' % i)\n    sys.__stderr__.write('deadbeef {\"done\": true}\\n')\ndef square(x):\n    return 0\n", tests: square, detail: "where square(3) = 0"},
		{name: "sitecustomize and pth in workspace", solution: "def square(x):\n    return 0\n",
			files: map[string]string{"sitecustomize.py": "import os\nos._exit(0)\n", "usercustomize.py": "import os\nos._exit(0)\n", "evil.pth": "import os; os._exit(0)\n"}, tests: square, detail: "where square(3) = 0"},
		{name: "planted stdlib module", solution: "def square(x):\n    return 0\n",
			files: map[string]string{"json.py": "raise SystemExit(0)\n", "ast.py": "raise SystemExit(0)\n", "traceback.py": "raise SystemExit(0)\n"}, tests: square, detail: "where square(3) = 0"},
		{name: "kill the test server", solution: "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n", tests: square, detail: "ended without a result"},
		{name: "kill the trusted grader", solution: "import os, signal\nstat = open('/proc/%d/stat' % os.getppid()).read()\nos.kill(int(stat.rsplit(')', 1)[1].split()[1]), signal.SIGKILL)\n",
			tests: square, broken: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := runGrader(t, tc.solution, tc.tests, tc.setup, tc.files)
			if tc.broken {
				if g.Broken == "" || g.Passed() {
					t.Fatalf("want a broken run, got %+v", g)
				}
				return
			}
			if g.Broken != "" {
				t.Fatalf("grader broke: %s", g.Broken)
			}
			if got := g.NumPassed(); got != tc.passed {
				t.Fatalf("passed %d of %d, want %d: %+v", got, len(tc.tests), tc.passed, g.Tests)
			}
			if g.Passed() != (tc.passed == len(tc.tests)) {
				t.Fatalf("Passed() = %v with %d/%d", g.Passed(), tc.passed, len(tc.tests))
			}
			if tc.detail != "" {
				var first string
				for _, r := range g.Tests {
					if !r.OK {
						first = r.Detail
						break
					}
				}
				if !strings.Contains(first, tc.detail) {
					t.Fatalf("first failure detail %q does not contain %q", first, tc.detail)
				}
			}
		})
	}
}

func TestParseGrade(t *testing.T) {
	const n = "abc"
	cases := []struct {
		name   string
		stdout string
		passed int
		broken bool
	}{
		{"all", "abc {\"i\":0,\"ok\":true}\nabc {\"i\":1,\"ok\":true}\nabc {\"done\":true}\n", 2, false},
		{"noise ignored", "xyz {\"i\":1,\"ok\":true}\nabc {\"i\":0,\"ok\":true}\nhello\nabc {\"i\":1,\"ok\":false}\nabc {\"done\":true}\n", 1, false},
		{"no done", "abc {\"i\":0,\"ok\":true}\nabc {\"i\":1,\"ok\":true}\n", 0, true},
		{"missing verdict", "abc {\"i\":0,\"ok\":true}\nabc {\"done\":true}\n", 0, true},
		{"duplicate verdict", "abc {\"i\":0,\"ok\":true}\nabc {\"i\":0,\"ok\":true}\nabc {\"i\":1,\"ok\":true}\nabc {\"done\":true}\n", 0, true},
		{"out of range", "abc {\"i\":0,\"ok\":true}\nabc {\"i\":1,\"ok\":true}\nabc {\"i\":2,\"ok\":true}\nabc {\"done\":true}\n", 0, true},
		{"malformed", "abc {\"i\":0,\"ok\":true}\nabc {\"i\":1,\"ok\":true}\nabc {\nabc {\"done\":true}\n", 0, true},
		{"empty", "", 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := parseGrade(core.ExecResult{Stdout: tc.stdout}, n, 2)
			if (g.Broken != "") != tc.broken || g.NumPassed() != tc.passed {
				t.Fatalf("got broken=%q passed=%d, want broken=%v passed=%d", g.Broken, g.NumPassed(), tc.broken, tc.passed)
			}
		})
	}
}

// The leftover-process kill runs wherever the sandbox has its own PID
// namespace, whatever else the backend reports about its isolation.
func TestOwnPIDNamespace(t *testing.T) {
	for iso, want := range map[string]bool{
		"namespaces": true, "namespaces (seccomp off)": true,
		"none": false, "cloud": false, "": false, "namespacesX": false,
	} {
		if got := ownPIDNamespace(iso); got != want {
			t.Errorf("ownPIDNamespace(%q) = %v, want %v", iso, got, want)
		}
	}
}
