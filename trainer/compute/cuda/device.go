package cuda

import "unsafe"

// Driver is what the backend needs from a GPU: raw memory, copies, kernel
// launches by name and a column-major SGEMM with cuBLAS's semantics, all
// queued on one stream. The cuda build tag provides the real one
// (gorgonia.org/cu, NVRTC, cuBLAS); tests use kernels.Emulator.
type Driver interface {
	// Name describes the device for logs.
	Name() string
	// Alloc returns a device address of bytes zeroed bytes.
	Alloc(bytes int) (uint64, error)
	Free(ptr uint64) error
	// HtoD and DtoH copy synchronously with respect to the host memory.
	HtoD(dst uint64, src unsafe.Pointer, bytes int) error
	DtoH(dst unsafe.Pointer, src uint64, bytes int) error
	// Launch queues kernel with one argument per uint64 (pointers, and
	// int32/float32 values in the low 32 bits).
	Launch(kernel string, grid, block [3]int, args []uint64) error
	// Sgemm is cublasSgemm: column-major C = alpha op(A) op(B) + beta C.
	Sgemm(transA, transB bool, m, n, k int, alpha float32, a uint64, lda int, b uint64, ldb int, beta float32, c uint64, ldc int) error
	// GemmBF16 is cublasGemmEx with BF16 A and B, FP32 C and FP32
	// accumulation (CUBLAS_COMPUTE_32F), column-major like Sgemm.
	GemmBF16(transA, transB bool, m, n, k int, alpha float32, a uint64, lda int, b uint64, ldb int, beta float32, c uint64, ldc int) error
	// Sync waits for everything queued.
	Sync() error
	Close() error
}
