package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The README's way to depend on the SDK, command by command: a module of
// its own beside a checkout (../rlhost), built offline (GOPROXY=off) from
// the module cache this repository's build filled. Only the clone is left
// out: the checkout is this one.
func TestBuildsAsItsOwnModule(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("needs the go command")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "## Depend on the SDK from your own module")
	_, block, ok2 := strings.Cut(section, "```sh\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("the README has no sh block under \"Depend on the SDK from your own module\"")
	}
	work := t.TempDir()
	if err := os.Symlink(root, filepath.Join(work, "rlhost")); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(work, "my-env")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"env.go", "main.go"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A user's environment, without this repository's go settings, and
	// without a network.
	env := append(os.Environ(), "GOFLAGS=", "GOPROXY=off", "GOWORK=off", "GONOSUMDB=", "GOPRIVATE=")
	ran := 0
	for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
		if strings.HasPrefix(line, "git clone ") {
			continue // the checkout is this one, built by the test run
		}
		cmd := exec.Command("sh", "-c", line)
		cmd.Dir, cmd.Env = dir, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
		ran++
	}
	if _, err := os.Stat(filepath.Join(dir, "my-env")); err != nil || ran < 4 {
		t.Fatalf("after %d commands, no my-env: %v", ran, err)
	}
}
