package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// scripts/cuda/cuda_compat.h must turn gorgonia's pre-CUDA-13 calls into
// CUDA 13's entry points with the old meaning, and make gorgonia's cuInit
// a no-op. Checked with a C program against a header of CUDA 13's shape;
// both headers are installed as cuda.h in a temporary include tree, as the
// build does.
func TestCompatHeaderMapsCUDA13Calls(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler (cc) on this machine")
	}
	tmp := t.TempDir()
	compat, sdk := filepath.Join(tmp, "compat"), filepath.Join(tmp, "sdk")
	for dir, src := range map[string]string{compat: "../../../scripts/cuda/cuda_compat.h", sdk: "testdata/cuda13_shape.h"} {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cuda.h"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(tmp, "calls")
	build := exec.Command(cc, "-Wall", "-Werror", "-I", compat, "-I", sdk, "-o", bin, "testdata/cuda13_calls.c")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("compile: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).CombinedOutput()
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	want := []string{
		"gorgonia cuInit -> 0", // the deferred no-op, not the real one
		"cuCtxCreate_v4(params=NULL, flags=4, dev=1)",
		"cuMemAdvise_v2(64, 128, 1, type=1 id=2)",
		"cuMemAdvise_v2(64, 128, 1, type=2 id=0)",
		"cuMemPrefetchAsync_v2(64, 256, type=1 id=3, flags=0, stream=(nil))",
		"target 30 62",
	}
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
