//go:build cuda && cudastub

package cuda

// stubSDK: this binary was linked against scripts/cuda/stub-sdk.sh's
// libraries, which exist to compile-check; Open refuses to run.
const stubSDK = true
