//go:build cuda && !cudaemu && !cudastub

package cuda_test

import (
	"testing"

	"github.com/rlhost/rlhost/trainer/compute/cuda"
)

// newCUDA opens the real GPU; these tests are meant to run on one
// (scripts/cuda/gpu-check.sh), so a missing GPU is a failure, not a skip.
func newCUDA(t *testing.T) *cuda.Device {
	t.Helper()
	b, err := cuda.Open(0)
	if err != nil {
		t.Fatalf("open GPU: %v", err)
	}
	t.Cleanup(b.Close)
	return b
}
