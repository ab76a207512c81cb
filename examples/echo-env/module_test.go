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
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
	// What `go mod tidy` writes for the user (README): the go line and the
	// checkout's requirements, at the versions the checkout pins. Without
	// them the go command walks the full graph of pre-1.17 dependencies
	// and needs go.mod files this offline build never fetched.
	rootMod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goLine, requires := "go 1.26.0", ""
	inRequire := false
	for _, l := range strings.Split(string(rootMod), "\n") {
		switch {
		case strings.HasPrefix(l, "go "):
			goLine = l
		case strings.HasPrefix(l, "require ("):
			inRequire = true
			requires += l + "\n"
		case inRequire:
			requires += l + "\n"
			inRequire = l != ")"
		case strings.HasPrefix(l, "require "):
			requires += l + "\n"
		}
	}
	mod := "module example.com/my-env\n\n" + goLine + "\n\nrequire github.com/rlhost/rlhost v0.0.0\n\n" + requires + "\nreplace github.com/rlhost/rlhost => " + root + "\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(goBin, "build", "-o", filepath.Join(dir, "my-env"), ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build in a module of its own: %v\n%s", err, out)
	}
}
