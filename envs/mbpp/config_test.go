package mbpp

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rlhost/rlhost/core/schema"
)

func TestConfigure(t *testing.T) {
	cases := []struct {
		name string
		cfg  map[string]any
		path string // attribute named by the first diagnostic; "" = no error
	}{
		{"defaults", map[string]any{}, ""},
		{"everything", map[string]any{"format": "jsonl", "split": "all", "limit": 5, "shuffle": true, "seed": 3,
			"tools": []string{"bash"}, "max_attempts": 5, "attempt_discount": 0.9, "include_challenge_tests": true,
			"tool_output_cap": 1000, "feedback_cap": 1000, "bash_timeout": "5s", "test_timeout": "2s",
			"solution_path": "src/answer.py", "python": "/usr/bin/python3", "system_prompt": "Write {solution_path}."}, ""},
		{"no dataset", map[string]any{"dataset": ""}, "dataset"},
		{"missing dataset file", map[string]any{"dataset": "nope.jsonl"}, "dataset"},
		{"bad format", map[string]any{"format": "csv"}, "format"},
		{"bad split", map[string]any{"split": "dev"}, "split"},
		{"negative limit", map[string]any{"limit": -1}, "limit"},
		{"unknown tool", map[string]any{"tools": []string{"bash", "python"}}, "tools"},
		{"no tools", map[string]any{"tools": []string{}}, "tools"},
		{"zero attempts", map[string]any{"max_attempts": 0}, "max_attempts"},
		{"discount above one", map[string]any{"attempt_discount": 1.5}, "attempt_discount"},
		{"discount zero", map[string]any{"attempt_discount": 0}, "attempt_discount"},
		{"tiny cap", map[string]any{"tool_output_cap": 10}, "tool_output_cap"},
		{"bad duration", map[string]any{"bash_timeout": "soon"}, "bash_timeout"},
		{"negative duration", map[string]any{"test_timeout": "-1s"}, "test_timeout"},
		{"solution outside workspace", map[string]any{"solution_path": "/tmp/solution.py"}, "solution_path"},
		{"solution climbs", map[string]any{"solution_path": "../solution.py"}, "solution_path"},
		{"solution not python", map[string]any{"solution_path": "solution.txt"}, "solution_path"},
		{"relative workspace", map[string]any{"workspace": "ws"}, "workspace"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := map[string]any{"dataset": "sample.jsonl"}
			for k, v := range tc.cfg {
				cfg[k] = v
			}
			js, _ := json.Marshal(cfg)
			e := New()
			ds := e.Configure(context.Background(), schema.Config{Name: "m", JSON: js, BaseDir: "../../examples/mbpp"})
			if tc.path == "" {
				if ds.HasErrors() {
					t.Fatalf("unexpected diagnostics: %v", ds.Err())
				}
				if _, err := e.Tasks(context.Background()); err != nil {
					t.Fatal(err)
				}
				return
			}
			if !ds.HasErrors() || len(ds[0].Path) == 0 || ds[0].Path[0] != tc.path {
				t.Fatalf("diagnostics %+v, want an error at %q", ds, tc.path)
			}
		})
	}
	t.Run("unknown attribute", func(t *testing.T) {
		ds := New().Configure(context.Background(), schema.Config{Name: "m", JSON: []byte(`{"dataset": "x", "datset": "y"}`)})
		if !ds.HasErrors() {
			t.Fatal("unknown attribute accepted")
		}
	})
}

func TestSpecDefaultsMatchConfig(t *testing.T) {
	// The HCL schema's defaults must decode to defaultConfig, or HCL users
	// and Go callers would get different environments.
	obj := map[string]json.RawMessage{"dataset": json.RawMessage(`"x"`)}
	for _, a := range spec().Attributes {
		if a.Default != nil {
			obj[a.Name] = a.Default
		}
	}
	js, _ := json.Marshal(obj)
	got := defaultConfig()
	if err := (schema.Config{JSON: js}).Decode(&got); err != nil {
		t.Fatal(err)
	}
	want := defaultConfig()
	want.Dataset = "x"
	gj, _ := json.Marshal(got)
	wj, _ := json.Marshal(want)
	if string(gj) != string(wj) {
		t.Fatalf("spec defaults %s\n!= config defaults %s", gj, wj)
	}
}

func TestTasksAndInfo(t *testing.T) {
	e := New()
	if _, err := e.Tasks(context.Background()); err == nil {
		t.Fatal("Tasks before Configure succeeded")
	}
	if e.Info().Name != "mbpp" {
		t.Fatalf("name %q", e.Info().Name)
	}
	js := []byte(`{"dataset": "sample.jsonl", "limit": 5, "shuffle": true, "seed": 1}`)
	if ds := e.Configure(context.Background(), schema.Config{Name: "m", JSON: js, BaseDir: "../../examples/mbpp"}); ds.HasErrors() {
		t.Fatal(ds.Err())
	}
	a, _ := e.Tasks(context.Background())
	b, _ := e.Tasks(context.Background())
	if len(a) != 5 || a[0].ID != b[0].ID || a[4].ID != b[4].ID || a[0].Prompt == "" || len(a[0].Data) != 0 {
		t.Fatalf("tasks %+v", a)
	}
}

func TestTruncate(t *testing.T) {
	long := strings.Repeat("a", 5000) + "TAIL"
	cases := []struct {
		name, in string
		n        int
		marker   bool
	}{
		{"short", "hello", 100, false},
		{"exact", strings.Repeat("x", 100), 100, false},
		{"long", long, 300, true},
		{"multibyte", strings.Repeat("é", 3000), 301, true},
		{"invalid utf8", "ok\xff\xfe" + strings.Repeat("b", 1000), 200, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := truncate(tc.in, tc.n)
			if len(got) > tc.n {
				t.Fatalf("len %d > cap %d", len(got), tc.n)
			}
			if !utf8.ValidString(got) {
				t.Fatalf("invalid UTF-8: %q", got)
			}
			if strings.Contains(got, truncMarker) != tc.marker {
				t.Fatalf("marker presence wrong: %q", got)
			}
		})
	}
	if got := truncate(long, 300); !strings.HasSuffix(got, "TAIL") || !strings.Contains(got, "of 5004 bytes omitted") {
		t.Fatalf("tail or count lost: %q", got)
	}
}

func TestFeedbackIsCapped(t *testing.T) {
	c := defaultConfig()
	c.FeedbackCap = 600
	g := GradeResult{Tests: []TestResult{{OK: false, Detail: "assert f(1) == 2\n" + strings.Repeat("Traceback line\n", 500)}, {OK: true}}}
	fb := feedback(&c, g, 1)
	if len(fb) > 600 || !strings.Contains(fb, "assert f(1) == 2") || !strings.Contains(fb, "1 of 2 tests passed") || !strings.HasSuffix(fb, "run the tests again.") {
		t.Fatalf("feedback (%d bytes): %q", len(fb), fb)
	}
}

func FuzzTruncate(f *testing.F) {
	f.Add("hello world", 300)
	f.Add(strings.Repeat("é", 500), 256)
	f.Fuzz(func(t *testing.T, s string, n int) {
		if n < 256 || n > 1<<20 {
			return
		}
		got := truncate(s, n)
		if len(got) > n || !utf8.ValidString(got) {
			t.Fatalf("truncate(%d bytes, %d) = %d bytes, valid=%v", len(s), n, len(got), utf8.ValidString(got))
		}
	})
}

func FuzzParseArgs(f *testing.F) {
	f.Add("write_file", `{"path": "a.py", "content": "x"}`)
	f.Add("bash", `{"command": "ls"}`)
	f.Add("bash", `{"command": "ls"} {}`)
	f.Add("read_file", `{"path": 1}`)
	f.Add("bash", `null`)
	f.Fuzz(func(t *testing.T, tool, raw string) {
		want, ok := toolParams[tool]
		if !ok {
			return
		}
		args, err := parseArgs(tool, raw)
		if err != nil {
			if !strings.Contains(err.Error(), tool+" expects") {
				t.Fatalf("error does not tell the model what was expected: %v", err)
			}
			return
		}
		if len(args) != len(want) {
			t.Fatalf("args %v for %v", args, want)
		}
	})
}
