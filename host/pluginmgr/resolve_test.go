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
