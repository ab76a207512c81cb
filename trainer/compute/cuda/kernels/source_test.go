package kernels

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
)

// The source must be valid CUDA, not just valid C++ for the emulator:
// clang's CUDA front end compiles it to PTX for sm_80 here, with no CUDA
// SDK. NVRTC compiles the same text at run time on a GPU.
func TestSourceCompilesToPTX(t *testing.T) {
	clang, err := exec.LookPath("clang")
	if err != nil {
		if os.Getenv("RLHOST_REQUIRE_CLANG_CUDA") != "" {
			t.Fatal("clang not found and RLHOST_REQUIRE_CLANG_CUDA is set")
		}
		t.Skip("clang not installed: cannot compile the kernels as CUDA here (apt-get install clang)")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "kernels.cu")
	if err := os.WriteFile(src, []byte(Source), 0o644); err != nil {
		t.Fatal(err)
	}
	prelude, err := filepath.Abs("testdata/clang_cuda_prelude.h")
	if err != nil {
		t.Fatal(err)
	}
	ptx := filepath.Join(dir, "kernels.ptx")
	cmd := exec.Command(clang, "-x", "cuda", "--cuda-device-only", "--cuda-gpu-arch=sm_80", "-nocudainc", "-nocudalib",
		"-Wall", "-Werror", "-include", prelude, "-S", "-o", ptx, src)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("clang -x cuda: %v\n%s", err, out)
	}
	b, err := os.ReadFile(ptx)
	if err != nil {
		t.Fatal(err)
	}
	var entries []string
	for _, m := range regexp.MustCompile(`\.entry (\w+)\(`).FindAllStringSubmatch(string(b), -1) {
		entries = append(entries, m[1])
	}
	slices.Sort(entries)
	names := Names()
	slices.Sort(names)
	if !slices.Equal(entries, names) {
		t.Fatalf("PTX entries %v, source kernels %v", entries, names)
	}
}

func TestNames(t *testing.T) {
	names := Names()
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			t.Errorf("kernel %s defined twice", n)
		}
		seen[n] = true
	}
	for _, want := range []string{"k_rmsnorm", "k_attn_fwd", "k_attn_bwd_dkv", "k_logprobs_bwd", "k_adamw", "k_attn_cached"} {
		if !seen[want] {
			t.Errorf("no kernel %s in the source", want)
		}
	}
}
