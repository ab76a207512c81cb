package config

import (
	"strings"
	"testing"
)

// python is the host's setting only in the block of a .py plugin; any other
// plugin keeps it as one of its own settings (the built-in coding env has
// one, for the sandbox's interpreter).
func TestEnvPythonSetting(t *testing.T) {
	cases := []struct {
		name, block string
		wantPlugin  string // with the interpreter folded in, NUL shown as |
		wantBody    bool   // python is still in the plugin's body
	}{
		{"py with python", `plugin = "./e.py"` + "\n  python = \"/opt/venv/bin/python\"", "./e.py|python=/opt/venv/bin/python", false},
		{"py without python", `plugin = "./e.py"`, "./e.py", false},
		{"go plugin keeps python", `plugin = "coding"` + "\n  python = \"python3\"", "coding", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := "sandbox \"s\" { backend = \"local\" }\nenv \"e\" {\n  " + tc.block + "\n}\npolicy \"p\" {\n  provider = \"replay\"\n}\n"
			f, diags := Parse("job.hcl", []byte(src), nil)
			if diags.HasErrors() {
				t.Fatalf("parse: %v", diags)
			}
			e := f.Envs[0]
			if got := strings.ReplaceAll(e.Plugin, "\x00", "|"); got != tc.wantPlugin {
				t.Errorf("plugin ref = %q, want %q", got, tc.wantPlugin)
			}
			attrs, _ := e.Body.JustAttributes()
			if _, ok := attrs["python"]; ok != tc.wantBody {
				t.Errorf("python in the plugin's body: %v, want %v", ok, tc.wantBody)
			}
			if !tc.wantBody && strings.Contains(tc.block, "python =") {
				if r, ok := e.AttrRanges["python"]; !ok || r.Start.Line != 4 {
					t.Errorf("python's range = %v, want line 4", r)
				}
			}
		})
	}
	_, diags := Parse("job.hcl", []byte("env \"e\" {\n  plugin = \"./e.py\"\n  python = [\"a\"]\n}\n"), nil)
	if d := firstError(diags); d == nil || d.Subject == nil || d.Subject.Start.Line != 3 {
		t.Errorf("python = [a]: got %v, want an error on line 3", diags)
	}
}
