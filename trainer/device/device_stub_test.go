//go:build cuda && cudastub

package device

import (
	"errors"
	"strings"
	"testing"

	"github.com/rlhost/rlhost/trainer/compute/cuda"
)

// In a binary linked against the stub SDK, "cuda" fails with ErrStubSDK
// and "auto" falls back to the CPU saying why.
func TestStubBuild(t *testing.T) {
	if _, _, err := Open("cuda"); !errors.Is(err, cuda.ErrStubSDK) {
		t.Fatalf("Open(cuda) = %v, want ErrStubSDK", err)
	}
	b, why, err := Open("auto")
	if err != nil {
		t.Fatalf("Open(auto): %v", err)
	}
	defer b.Close()
	if !strings.HasPrefix(why, "cpu (") || !strings.Contains(why, "stub CUDA SDK") {
		t.Fatalf("Open(auto) says %q", why)
	}
}
