//go:build cudaemu

package cuda_test

import (
	"testing"

	"github.com/rlhost/rlhost/trainer/backend/cuda"
	"github.com/rlhost/rlhost/trainer/backend/cuda/kernels"
)

// newCUDA runs the CUDA backend's op code on the kernel emulator.
func newCUDA(t *testing.T) *cuda.Backend {
	t.Helper()
	b := cuda.New(kernels.NewEmulator())
	t.Cleanup(b.Close)
	return b
}
