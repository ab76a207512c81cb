package pluginmgr

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestResolve(t *testing.T) {
	base := t.TempDir()
	plugDir := t.TempDir()
	exe := func(dir, name string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	exe(base, "my-env", 0o755)
	exe(base, "not-exec", 0o644)
	exe(plugDir, "rlhost-env-found", 0o755)
	exe(plugDir, "rlhost-sandbox-cloud", 0o755)
	os.Mkdir(filepath.Join(base, "adir"), 0o755)

	m, err := New(Options{Self: "/opt/rlhost", Builtins: map[string][]string{"env": {"coding", "mbpp"}, "sandbox": {"local"}}, Dirs: []string{plugDir}})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		kind, ref string
		wantPath  string
		builtin   bool
		wantErr   string
	}{
		{"env", "coding", "/opt/rlhost", true, ""},
		{"sandbox", "local", "/opt/rlhost", true, ""},
		{"env", "./my-env", filepath.Join(base, "my-env"), false, ""},
		{"env", filepath.Join(base, "my-env"), filepath.Join(base, "my-env"), false, ""},
		{"env", "found", filepath.Join(plugDir, "rlhost-env-found"), false, ""},
		{"sandbox", "cloud", filepath.Join(plugDir, "rlhost-sandbox-cloud"), false, ""},
		{"env", "cloud", "", false, "unknown env plugin \"cloud\""},
		{"env", "./missing", "", false, "no plugin executable"},
		{"env", "./not-exec", "", false, "not executable"},
		{"env", "./adir", "", false, "is a directory"},
		{"sandbox", "coding", "", false, "built-in sandbox plugins are local"},
		{"sandbox", "lcoal", "", false, `unknown sandbox plugin "lcoal": did you mean "local"?`},
		{"env", "codign", "", false, `unknown env plugin "codign": did you mean "coding"?`},
		{"env", "", "", false, "no env plugin named"},
	}
	for _, tc := range cases {
		t.Run(tc.kind+"/"+tc.ref, func(t *testing.T) {
			src, err := m.Resolve(tc.kind, tc.ref, base)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Resolve(%q) error = %v, want it to contain %q", tc.ref, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve(%q): %v", tc.ref, err)
			}
			if src.Path != tc.wantPath || src.Builtin != tc.builtin || src.Kind != tc.kind {
				t.Fatalf("Resolve(%q) = %+v", tc.ref, src)
			}
			if tc.builtin && strings.Join(src.Args, " ") != BuiltinArg+" "+tc.kind+" "+tc.ref {
				t.Errorf("built-in args = %v", src.Args)
			}
		})
	}
	found := m.Discover("env")
	if len(found) != 1 || found[0].Name != "found" {
		t.Errorf("Discover(env) = %+v", found)
	}
}

// A .py plugin runs under its interpreter: python3 from PATH by default, or
// the block's python setting, a command or a path relative to the job file.
func TestResolvePython(t *testing.T) {
	base := t.TempDir()
	bin := t.TempDir()
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{{filepath.Join(base, "my_env.py"), 0o644}, {filepath.Join(base, "venv-python"), 0o755}, {filepath.Join(bin, "python3"), 0o755}, {filepath.Join(bin, "pypy3"), 0o755}} {
		if err := os.WriteFile(f.path, []byte("#!/bin/sh\n"), f.mode); err != nil {
			t.Fatal(err)
		}
	}
	os.Mkdir(filepath.Join(base, "dir.py"), 0o755)
	t.Setenv("PATH", bin)
	m, err := New(Options{Self: "/opt/rlhost", Dirs: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(base, "my_env.py")
	cases := []struct {
		ref, wantPath, wantErr string
	}{
		{"./my_env.py", filepath.Join(bin, "python3"), ""},
		{WithPython("./my_env.py", "pypy3"), filepath.Join(bin, "pypy3"), ""},
		{WithPython("./my_env.py", "./venv-python"), filepath.Join(base, "venv-python"), ""},
		{WithPython(script, "python3"), filepath.Join(bin, "python3"), ""},
		{WithPython("./my_env.py", "python9"), "", "python interpreter \"python9\" not found"},
		{WithPython("./my_env.py", "./nope/python"), "", "no plugin executable"},
		{"./missing.py", "", "no plugin script"},
		{"./dir.py", "", "is a directory"},
		{WithPython("./my-env", "python3"), "", "not a .py file"},
	}
	for _, tc := range cases {
		name := strings.ReplaceAll(tc.ref, "\x00", " ")
		t.Run(name, func(t *testing.T) {
			src, err := m.Resolve("env", tc.ref, base)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Resolve(%q) error = %v, want it to contain %q", name, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve(%q): %v", name, err)
			}
			if src.Path != tc.wantPath || len(src.Args) != 1 || src.Args[0] != script || src.Builtin {
				t.Fatalf("Resolve(%q) = %+v", name, src)
			}
			if strings.ContainsRune(src.Name, 0) || strings.ContainsRune(src.String(), 0) {
				t.Errorf("the interpreter leaks into the name: %q", src.String())
			}
		})
	}
}
