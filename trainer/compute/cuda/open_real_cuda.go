//go:build cuda && !cudastub

package cuda

const stubSDK = false
