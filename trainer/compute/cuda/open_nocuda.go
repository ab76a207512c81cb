//go:build !cuda

package cuda

// Built reports whether this binary has the CUDA backend.
const Built = false

// Open fails: this build has no CUDA support.
func Open(ordinal int) (*Device, error) { return nil, ErrNotBuilt }
