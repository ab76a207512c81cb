package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The README's way to depend on the SDK: a module of its own whose go.mod
// replaces github.com/rlhost/rlhost with a checkout. Built offline, from
// the module cache this repository's build already filled.
func TestBuildsAsItsOwnModule(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("needs the go command")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, f := range []string{"env.go", "main.go"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644)
	goLine := "go 1.26.0"
	if rootMod, err := os.ReadFile(filepath.Join(root, "go.mod")); err == nil {
		for _, l := range strings.Split(string(rootMod), "\n") {
			if strings.HasPrefix(l, "go ") {
				goLine = l
			}
		}
	}
	mod := "module example.com/my-env\n\n" + goLine + "\n\nrequire github.com/rlhost/rlhost v0.0.0\n\nreplace github.com/rlhost/rlhost => " + root + "\n"
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644)
	cmd := exec.Command(goBin, "build", "-o", filepath.Join(dir, "my-env"), ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build in a module of its own: %v\n%s", err, out)
	}
}
