//go:build cuda && cudastub

package cuda_test

import (
	"errors"
	"testing"

	"github.com/rlhost/rlhost/trainer/compute/cuda"
)

// A binary linked against the stub SDK must refuse to open a device.
func TestStubBuildRefusesToOpen(t *testing.T) {
	b, err := cuda.Open(0)
	if !errors.Is(err, cuda.ErrStubSDK) {
		t.Fatalf("Open = %v, %v; want ErrStubSDK", b, err)
	}
}
