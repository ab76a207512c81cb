//go:build cuda

package cuda

// The driver API, modules and launches come from gorgonia.org/cu. cuBLAS
// is called directly with the functions below: gorgonia's cu/blas
// takes Go slices for matrices, while this backend's matrices are device
// addresses. cuInit is called here, not in gorgonia's package init (see
// scripts/cuda/cuda_compat.h).

/*
#cgo LDFLAGS: -lcublas -lcuda
#include <stdint.h>
#include <cuda.h>
#include <cublas_v2.h>
#ifdef cuInit
#undef cuInit
#endif

static int rl_init(void) { return (int)cuInit(0); }

static int rl_blas_create(cublasHandle_t *h, uintptr_t stream) {
	int st = (int)cublasCreate(h);
	if (st != 0) return st;
	return (int)cublasSetStream(*h, (cudaStream_t)stream);
}

static int rl_blas_destroy(cublasHandle_t h) { return (int)cublasDestroy(h); }

static int rl_sgemm(cublasHandle_t h, int ta, int tb, int m, int n, int k, float alpha, uint64_t a, int lda,
                    uint64_t b, int ldb, float beta, uint64_t c, int ldc) {
	return (int)cublasSgemm(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha,
	                        (const float *)(uintptr_t)a, lda, (const float *)(uintptr_t)b, ldb, &beta,
	                        (float *)(uintptr_t)c, ldc);
}

// BF16 inputs, FP32 output and FP32 accumulation (CUDA 11 and later).
static int rl_gemm_bf16(cublasHandle_t h, int ta, int tb, int m, int n, int k, float alpha, uint64_t a, int lda,
                        uint64_t b, int ldb, float beta, uint64_t c, int ldc) {
	return (int)cublasGemmEx(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha,
	                         (const void *)(uintptr_t)a, CUDA_R_16BF, lda, (const void *)(uintptr_t)b, CUDA_R_16BF, ldb,
	                         &beta, (void *)(uintptr_t)c, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"gorgonia.org/cu"
	"gorgonia.org/cu/nvrtc"

	"github.com/rlhost/rlhost/trainer/compute/cuda/kernels"
)

// Built reports whether this binary has the CUDA backend.
const Built = true

// cudaErrorStubLibrary is CUDA_ERROR_STUB_LIBRARY: the process loaded a
// stub libcuda rather than the driver's.
const cudaErrorStubLibrary = 34

// ErrStubSDK is returned by Open in a binary linked against the stub SDK.
var ErrStubSDK = errors.New("this rlhost was compiled against the stub CUDA SDK (a compile check only); build it against a real CUDA toolkit with `make build-cuda CUDA_HOME=...`")

// Open initialises the driver, creates a context on GPU ordinal, compiles
// the kernels with NVRTC and returns a backend on it.
func Open(ordinal int) (*Device, error) {
	if stubSDK {
		return nil, ErrStubSDK
	}
	switch rc := C.rl_init(); rc {
	case 0:
	case cudaErrorStubLibrary:
		return nil, ErrStubSDK
	default:
		return nil, fmt.Errorf("cuda: cuInit failed (%v): no usable NVIDIA driver or GPU", cuError(rc))
	}
	n, err := cu.NumDevices()
	if err != nil {
		return nil, fmt.Errorf("cuda: counting devices: %w", err)
	}
	if n == 0 {
		return nil, errors.New("cuda: no CUDA GPU found")
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("cuda: GPU %d requested, %d present", ordinal, n)
	}
	d, err := openDevice(cu.Device(ordinal))
	if err != nil {
		return nil, err
	}
	return New(d), nil
}

// cuError names a CUresult code.
func cuError(rc C.int) string { return fmt.Sprintf("CUresult %d", int(rc)) }

type gpu struct {
	dev    cu.Device
	ctx    cu.CUContext
	stream cu.Stream
	mod    cu.Module
	fns    map[string]cu.Function
	blas   C.cublasHandle_t
	name   string
	params []unsafe.Pointer
}

func openDevice(dev cu.Device) (_ *gpu, err error) {
	g := &gpu{dev: dev, fns: map[string]cu.Function{}}
	name, err := dev.Name()
	if err != nil {
		return nil, fmt.Errorf("cuda: device name: %w", err)
	}
	major, minor, err := dev.ComputeCapability()
	if err != nil {
		return nil, fmt.Errorf("cuda: compute capability: %w", err)
	}
	g.name = fmt.Sprintf("%s (sm_%d%d)", name, major, minor)
	if g.ctx, err = dev.MakeContext(cu.SchedAuto); err != nil {
		return nil, fmt.Errorf("cuda: create context on %s: %w", g.name, err)
	}
	defer func() {
		if err != nil {
			_ = g.Close()
		}
	}()
	if err := g.bind(); err != nil {
		return nil, err
	}
	if g.stream, err = cu.MakeStream(cu.NonBlocking); err != nil {
		return nil, fmt.Errorf("cuda: create stream: %w", err)
	}
	ptx, err := compileKernels(major, minor)
	if err != nil {
		return nil, err
	}
	if g.mod, err = cu.LoadData(ptx); err != nil {
		return nil, fmt.Errorf("cuda: load kernels on %s: %w", g.name, err)
	}
	for _, k := range kernels.Names() {
		f, err := g.mod.Function(k)
		if err != nil {
			return nil, fmt.Errorf("cuda: kernel %s: %w", k, err)
		}
		g.fns[k] = f
	}
	if rc := C.rl_blas_create(&g.blas, C.uintptr_t(uintptr(unsafe.Pointer(g.stream.C())))); rc != 0 {
		return nil, fmt.Errorf("cuda: cublasCreate/SetStream: cublasStatus %d", int(rc))
	}
	return g, nil
}

// compileKernels compiles kernels.Source to PTX for the device's
// architecture; the driver JIT-compiles the PTX when the module loads.
func compileKernels(major, minor int) (string, error) {
	prog, err := nvrtc.CreateProgram(kernels.Source, "rlhost_kernels.cu")
	if err != nil {
		return "", fmt.Errorf("cuda: nvrtc create program: %w", err)
	}
	defer func() { _ = prog.Destroy() }()
	arch := fmt.Sprintf("--gpu-architecture=compute_%d%d", major, minor)
	if err := prog.Compile(arch, "--std=c++17"); err != nil {
		log, _ := prog.GetLog()
		return "", fmt.Errorf("cuda: nvrtc compile (%s): %w\n%s", arch, err, strings.TrimSpace(log))
	}
	ptx, err := prog.GetPTX()
	if err != nil {
		return "", fmt.Errorf("cuda: nvrtc PTX: %w", err)
	}
	return ptx, nil
}

// bind makes the context current on this OS thread. Goroutines migrate
// between threads, so every entry point binds first; it is cheap.
func (g *gpu) bind() error {
	if err := cu.SetCurrentContext(g.ctx); err != nil {
		return fmt.Errorf("cuda: set context: %w", err)
	}
	return nil
}

func (g *gpu) Name() string { return g.name }

func (g *gpu) Alloc(bytes int) (uint64, error) {
	if err := g.bind(); err != nil {
		return 0, err
	}
	p, err := cu.MemAlloc(int64(max(bytes, 4)))
	if err != nil {
		return 0, err
	}
	if err := cu.MemsetD32Async(p, 0, int64(max(bytes, 4)/4), g.stream); err != nil {
		return 0, err
	}
	return uint64(p), nil
}

func (g *gpu) Free(p uint64) error {
	if err := g.bind(); err != nil {
		return err
	}
	return cu.MemFree(cu.DevicePtr(p))
}

// HtoD and DtoH wait for the copy: the host side is Go memory.
func (g *gpu) HtoD(dst uint64, src unsafe.Pointer, bytes int) error {
	if err := g.bind(); err != nil {
		return err
	}
	if err := cu.MemcpyHtoDAsync(cu.DevicePtr(dst), src, int64(bytes), g.stream); err != nil {
		return err
	}
	return g.stream.Synchronize()
}

func (g *gpu) DtoH(dst unsafe.Pointer, src uint64, bytes int) error {
	if err := g.bind(); err != nil {
		return err
	}
	if err := cu.MemcpyDtoHAsync(dst, cu.DevicePtr(src), int64(bytes), g.stream); err != nil {
		return err
	}
	return g.stream.Synchronize()
}

func (g *gpu) Launch(kernel string, grid, block [3]int, args []uint64) error {
	f, ok := g.fns[kernel]
	if !ok {
		return fmt.Errorf("no kernel %q", kernel)
	}
	if err := g.bind(); err != nil {
		return err
	}
	g.params = g.params[:0]
	for i := range args {
		g.params = append(g.params, unsafe.Pointer(&args[i]))
	}
	return f.Launch(grid[0], grid[1], grid[2], block[0], block[1], block[2], 0, g.stream, g.params)
}

func (g *gpu) Sgemm(transA, transB bool, m, n, k int, alpha float32, a uint64, lda int, b uint64, ldb int, beta float32, c uint64, ldc int) error {
	if err := g.bind(); err != nil {
		return err
	}
	if rc := C.rl_sgemm(g.blas, cbool(transA), cbool(transB), C.int(m), C.int(n), C.int(k), C.float(alpha),
		C.uint64_t(a), C.int(lda), C.uint64_t(b), C.int(ldb), C.float(beta), C.uint64_t(c), C.int(ldc)); rc != 0 {
		return fmt.Errorf("cublasSgemm: cublasStatus %d", int(rc))
	}
	return nil
}

func (g *gpu) GemmBF16(transA, transB bool, m, n, k int, alpha float32, a uint64, lda int, b uint64, ldb int, beta float32, c uint64, ldc int) error {
	if err := g.bind(); err != nil {
		return err
	}
	if rc := C.rl_gemm_bf16(g.blas, cbool(transA), cbool(transB), C.int(m), C.int(n), C.int(k), C.float(alpha),
		C.uint64_t(a), C.int(lda), C.uint64_t(b), C.int(ldb), C.float(beta), C.uint64_t(c), C.int(ldc)); rc != 0 {
		return fmt.Errorf("cublasGemmEx (bf16): cublasStatus %d", int(rc))
	}
	return nil
}

func cbool(v bool) C.int {
	if v {
		return 1
	}
	return 0
}

func (g *gpu) Sync() error {
	if err := g.bind(); err != nil {
		return err
	}
	return g.stream.Synchronize()
}

func (g *gpu) Close() error {
	if err := g.bind(); err != nil {
		return err
	}
	var zero C.cublasHandle_t
	if g.blas != zero {
		C.rl_blas_destroy(g.blas)
	}
	if len(g.fns) > 0 {
		_ = g.mod.Unload()
	}
	_ = g.stream.Destroy()
	return g.ctx.Destroy()
}
