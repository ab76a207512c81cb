// Package torchref runs the PyTorch reference scripts that tests compare
// rlhost's numerics with: Debian's /usr/bin/python3 with python3-torch, a
// JSON document on stdin and one on stdout. It is for tests only; nothing
// in a run imports it.
//
// Without torch a test skips, saying how to get it, unless
// RLHOST_REQUIRE_TORCH=1 (as in CI), which makes it fail.
package torchref

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"testing"
)

// Python is the interpreter that has torch.
const Python = "/usr/bin/python3"

// Require skips t, or fails it under RLHOST_REQUIRE_TORCH=1, when Python
// cannot import torch.
func Require(t testing.TB) {
	t.Helper()
	if err := exec.Command(Python, "-c", "import torch").Run(); err != nil {
		if os.Getenv("RLHOST_REQUIRE_TORCH") == "1" {
			t.Fatalf("RLHOST_REQUIRE_TORCH=1 but %s cannot import torch: %v", Python, err)
		}
		t.Skipf("%s cannot import torch (apt-get install python3-torch); set RLHOST_REQUIRE_TORCH=1 to make this fatal", Python)
	}
}

// Run runs script with in as JSON on its stdin and decodes its stdout
// into out.
func Run(t testing.TB, script string, in, out any) {
	t.Helper()
	Require(t)
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(Python, script)
	cmd.Stdin = bytes.NewReader(data)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	got, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, stderr.String())
	}
	if err := json.Unmarshal(got, out); err != nil {
		t.Fatalf("%s: %v", script, err)
	}
}
