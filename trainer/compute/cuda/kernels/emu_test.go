//go:build cudaemu

package kernels

import (
	"strings"
	"testing"
)

// The emulator's dispatch table must know every kernel in the source, or
// a kernel would go untested.
func TestEmulatorKnowsEveryKernel(t *testing.T) {
	names := Names()
	if len(names) < 20 {
		t.Fatalf("found only %d kernels in the source", len(names))
	}
	e := NewEmulator()
	defer e.Close()
	for _, n := range names {
		// No arguments: a known kernel fails the argument count check.
		err := e.Launch(n, [3]int{1, 1, 1}, [3]int{1, 1, 1}, nil)
		if err == nil || strings.Contains(err.Error(), "no kernel") {
			t.Errorf("%s: %v", n, err)
		}
	}
	if err := e.Launch("k_missing", [3]int{1, 1, 1}, [3]int{1, 1, 1}, nil); err == nil || !strings.Contains(err.Error(), "no kernel") {
		t.Errorf("unknown kernel: %v", err)
	}
}
