//go:build cudaemu

package kernels

// #cgo CXXFLAGS: -std=c++17 -O2
// #include <stdlib.h>
// #include <string.h>
// #include "emu.h"
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// launchMu serialises launches: the C side runs one grid at a time with
// process-wide fiber state (it stands in for the one GPU).
var launchMu sync.Mutex

// Emulator runs kernels.cuh on the CPU with CUDA's launch semantics and
// implements cuBLAS's column-major SGEMM and BF16 GemmEx naively. Device pointers are C
// heap addresses. It is single-threaded and slow: it exists to test the
// kernels' logic and the backend's launch geometry, not to compute.
type Emulator struct {
	live map[uint64]int
}

// NewEmulator returns an emulated device.
func NewEmulator() *Emulator { return &Emulator{live: map[uint64]int{}} }

// Name describes the device.
func (e *Emulator) Name() string { return "cuda-emulator (kernels run as C++ on the CPU)" }

// Alloc returns zeroed memory.
func (e *Emulator) Alloc(bytes int) (uint64, error) {
	p := C.calloc(C.size_t(max(bytes, 1)), 1)
	if p == nil {
		return 0, fmt.Errorf("emulator: calloc %d bytes failed", bytes)
	}
	a := uint64(uintptr(p))
	e.live[a] = bytes
	return a, nil
}

// Free releases memory from Alloc.
func (e *Emulator) Free(p uint64) error {
	if _, ok := e.live[p]; !ok {
		return fmt.Errorf("emulator: free of unknown pointer %#x", p)
	}
	delete(e.live, p)
	C.free(ptr(p))
	return nil
}

// ptr turns an emulated device address (C heap) back into a pointer.
func ptr(p uint64) unsafe.Pointer {
	return unsafe.Add(unsafe.Pointer(nil), uintptr(p)) // a C heap address, not Go memory
}

// HtoD copies host memory to the device.
func (e *Emulator) HtoD(dst uint64, src unsafe.Pointer, bytes int) error {
	C.memcpy(ptr(dst), src, C.size_t(bytes))
	return nil
}

// DtoH copies device memory to the host.
func (e *Emulator) DtoH(dst unsafe.Pointer, src uint64, bytes int) error {
	C.memcpy(dst, ptr(src), C.size_t(bytes))
	return nil
}

// Launch runs kernel over grid×block with args packed one per uint64.
func (e *Emulator) Launch(kernel string, grid, block [3]int, args []uint64) error {
	name := C.CString(kernel)
	defer C.free(unsafe.Pointer(name))
	var a *C.uint64_t
	if len(args) > 0 {
		ca := C.malloc(C.size_t(8 * len(args)))
		defer C.free(ca)
		copy(unsafe.Slice((*uint64)(ca), len(args)), args)
		a = (*C.uint64_t)(ca)
	}
	launchMu.Lock()
	defer launchMu.Unlock()
	switch rc := C.emu_launch(name, C.uint(grid[0]), C.uint(grid[1]), C.uint(grid[2]),
		C.uint(block[0]), C.uint(block[1]), C.uint(block[2]), C.int(len(args)), a); rc {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("emulator: %s: bad block %v", kernel, block)
	case 2:
		return fmt.Errorf("emulator: %s: wrong argument count %d", kernel, len(args))
	default:
		return fmt.Errorf("emulator: no kernel %q", kernel)
	}
}

// Sgemm is cublasSgemm (column-major).
func (e *Emulator) Sgemm(transA, transB bool, m, n, k int, alpha float32, a uint64, lda int, b uint64, ldb int, beta float32, c uint64, ldc int) error {
	C.emu_sgemm(cbool(transA), cbool(transB), C.int(m), C.int(n), C.int(k), C.float(alpha),
		(*C.float)(ptr(a)), C.int(lda), (*C.float)(ptr(b)), C.int(ldb), C.float(beta), (*C.float)(ptr(c)), C.int(ldc))
	return nil
}

// GemmBF16 is cublasGemmEx with BF16 inputs and FP32 accumulation.
func (e *Emulator) GemmBF16(transA, transB bool, m, n, k int, alpha float32, a uint64, lda int, b uint64, ldb int, beta float32, c uint64, ldc int) error {
	C.emu_gemm_bf16(cbool(transA), cbool(transB), C.int(m), C.int(n), C.int(k), C.float(alpha),
		(*C.uint16_t)(ptr(a)), C.int(lda), (*C.uint16_t)(ptr(b)), C.int(ldb), C.float(beta), (*C.float)(ptr(c)), C.int(ldc))
	return nil
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// Sync is a no-op: every call above has finished when it returns.
func (e *Emulator) Sync() error { return nil }

// Close frees everything still allocated.
func (e *Emulator) Close() error {
	for p := range e.live {
		C.free(ptr(p))
	}
	clear(e.live)
	return nil
}
