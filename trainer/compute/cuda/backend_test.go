package cuda

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/rlhost/rlhost/trainer/compute/cuda/kernels"
)

// Every kernel the backend launches must exist in the source (a typo
// would otherwise surface only on a GPU), and every kernel in the source
// must be launched by some op.
func TestLaunchedKernelsExist(t *testing.T) {
	src, err := os.ReadFile("backend.go")
	if err != nil {
		t.Fatal(err)
	}
	names := kernels.Names()
	launched := map[string]bool{}
	for _, m := range regexp.MustCompile(`launch\("(k_\w+)"`).FindAllStringSubmatch(string(src), -1) {
		launched[m[1]] = true
		if !slices.Contains(names, m[1]) {
			t.Errorf("backend launches %s, which kernels.cuh does not define", m[1])
		}
	}
	for _, n := range names {
		if !launched[n] {
			t.Errorf("kernel %s is never launched", n)
		}
	}
}

func TestArgPacking(t *testing.T) {
	cases := []struct {
		got, want uint64
	}{
		{i32(-1), 0xffffffff},
		{i32(7), 7},
		{f32(1), 0x3f800000},
		{f32(-0.5), 0xbf000000},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("packed %#x, want %#x", c.got, c.want)
		}
	}
}
