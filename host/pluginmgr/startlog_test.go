package pluginmgr

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/rlhost/rlhost/core/logtest"
)

func TestExcerpt(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines []string
		want  []string
	}{
		{"plain lines: the last five", []string{"a", "b", "", "c", "d", "e", "f", "g", ""}, []string{"c", "d", "e", "f", "g"}},
		{"python: the last exception and where", []string{
			"[ERROR] Traceback (most recent call last):",
			`[ERROR]   File "/x/env.py", line 17, in <module>`,
			"[ERROR]     import rlhost_env as rl",
			"[ERROR] ModuleNotFoundError: No module named 'rlhost_env'",
			"[ERROR] ",
			"[ERROR] During handling of the above exception, another exception occurred:",
			"[ERROR] ",
			"[ERROR] Traceback (most recent call last):",
			`[ERROR]   File "/x/env.py", line 20, in <module>`,
			"[ERROR]     import rlhost_env as rl",
			`[ERROR]   File "/sdk/rlhost_env/__init__.py", line 26, in <module>`,
			"[ERROR]     raise ImportError(",
			"[ERROR]     ^^^^^^^^^^^^",
			"[ERROR] ImportError: needs grpcio in /usr/bin/python3",
		}, []string{"ImportError: needs grpcio in /usr/bin/python3", `  (raised at "/sdk/rlhost_env/__init__.py", line 26, in <module>)`}},
		{"go panic: the panic line", []string{"starting", "panic: assignment to entry in nil map", "", "goroutine 1 [running]:", "main.main()", "\t/src/main.go:9"},
			[]string{"panic: assignment to entry in nil map"}},
		{"hclog JSON: level and message", []string{`{"@level":"error","@message":"cannot read tasks.jsonl","@module":"env","@timestamp":"2026-01-01T00:00:00Z"}`},
			[]string{"error: cannot read tasks.jsonl"}},
		{"nothing", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := excerpt(tc.lines); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("excerpt = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestStartErrorNamesWhatRanIt(t *testing.T) {
	exited := errors.New("Unrecognized remote plugin message: \nFailed to read any lines from plugin's stdout\nThis usually means\n  the plugin was not compiled for this architecture")
	py := Source{Kind: "env", Name: "./env.py", Path: "/usr/bin/python3", Args: []string{"/x/env.py"}}
	bin := Source{Kind: "env", Name: "./my-env", Path: "/x/my-env"}
	for _, tc := range []struct {
		name   string
		src    Source
		err    error
		stderr []string
		want   string
	}{
		{"python", py, exited, []string{"Traceback (most recent call last):", `  File "/x/env.py", line 3, in <module>`, "    import nope", "ModuleNotFoundError: No module named 'nope'"},
			"ModuleNotFoundError: No module named 'nope'\n  (raised at \"/x/env.py\", line 3, in <module>)\n" +
				`(env plugin "./env.py" exited before its handshake; interpreter /usr/bin/python3 (python = "..." in the env block names another))`},
		{"silent", bin, exited, nil, `env plugin "./my-env" exited before its handshake, and wrote nothing to stderr; it ran as /x/my-env`},
		{"stdout garbage", bin, errors.New("Unrecognized remote plugin message: hello\nThis usually means"), nil,
			`env plugin "./my-env" is not a working rlhost plugin: it printed "hello" on stdout where a plugin prints its handshake line, and wrote nothing to stderr; it ran as /x/my-env`},
		{"timeout", bin, errors.New("timeout while waiting for plugin to start"), []string{"still loading"},
			"still loading\n(env plugin \"./my-env\" did not complete its handshake in time; it ran as /x/my-env)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := startError(tc.src, tc.err, tc.stderr, nil).Error(); got != tc.want {
				t.Errorf("startError =\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// A starting plugin's log is held: printed as it came once the start
// worked, or at the debug level when it failed (its error says it all).
func TestStartGate(t *testing.T) {
	for _, failed := range []bool{false, true} {
		t.Run(fmt.Sprint("failed=", failed), func(t *testing.T) {
			out := &logtest.Buffer{}
			base := hclog.New(&hclog.LoggerOptions{Name: "rlhost", Output: out, Level: hclog.Debug, DisableTime: true})
			g := newStartGate(base)
			g.Named("script.py").Error("[ERROR] Traceback (most recent call last):")
			g.Warn("plugin failed to exit gracefully")
			if out.String() != "" {
				t.Fatalf("printed while starting: %q", out.String())
			}
			g.release(failed)
			got := out.String()
			want := []string{"[ERROR] rlhost.script.py: [ERROR] Traceback", "[WARN]  rlhost: plugin failed"}
			if failed {
				want = []string{"[DEBUG] rlhost.script.py: [ERROR] Traceback", "[DEBUG] rlhost: plugin failed"}
			}
			for _, w := range want {
				if !strings.Contains(got, w) {
					t.Errorf("log lacks %q:\n%s", w, got)
				}
			}
			g.Info("after the start")
			if !strings.Contains(out.String(), "[INFO]  rlhost: after the start") {
				t.Errorf("not passed through after release:\n%s", out.String())
			}
		})
	}
}

// The tail keeps the last lines, each bounded.
func TestStderrTail(t *testing.T) {
	var tail stderrTail
	for i := range tailLines + 5 {
		fmt.Fprintf(&tail, "line %d\n", i)
	}
	tail.Write([]byte(strings.Repeat("x", 3*tailLineBytes)))
	lines := tail.Lines()
	if len(lines) != tailLines+1 || lines[0] != "line 5" || len(lines[tailLines]) != tailLineBytes {
		t.Errorf("kept %d lines, first %q, last %d bytes", len(lines), lines[0], len(lines[len(lines)-1]))
	}
}
