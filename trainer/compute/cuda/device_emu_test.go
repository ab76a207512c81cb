//go:build cudaemu

package cuda_test

import (
	"testing"

	"github.com/rlhost/rlhost/trainer/compute/cuda"
	"github.com/rlhost/rlhost/trainer/compute/cuda/kernels"
)

// newCUDA runs the CUDA backend's op code on the kernel emulator.
func newCUDA(t *testing.T) *cuda.Device {
	t.Helper()
	b := cuda.New(kernels.NewEmulator())
	t.Cleanup(b.Close)
	return b
}
