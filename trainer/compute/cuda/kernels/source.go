// Package kernels holds the CUDA C source of the CUDA backend's kernels
// (kernels.cuh, compiled at run time with NVRTC) and, in the cudaemu
// build, an emulator that runs the same source as C++ on the CPU so that
// the kernels' logic is tested without a GPU.
//
// It knows nothing about the backend interface; package cuda chooses grid
// and block sizes and marshals arguments.
package kernels

import (
	_ "embed"
	"regexp"
)

// Source is the CUDA C text of every kernel.
//
//go:embed kernels.cuh
var Source string

// BlockThreads is NT in kernels.cuh: the block size every reducing kernel
// must be launched with.
const BlockThreads = 256

var kernelRe = regexp.MustCompile(`extern "C" __global__ void (k_\w+)\(`)

// Names lists the kernels Source defines, in source order.
func Names() []string {
	var out []string
	for _, m := range kernelRe.FindAllStringSubmatch(Source, -1) {
		out = append(out, m[1])
	}
	return out
}
