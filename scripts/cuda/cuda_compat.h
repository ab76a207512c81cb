/*
 * The build copies this file to .cache/cuda-compat/cuda.h (make
 * cuda-compat) and puts that directory first on the include path
 * (CGO_CFLAGS), so every `#include <cuda.h>` gets the SDK's header via
 * #include_next plus the definitions below. It does two things, both without touching
 * gorgonia.org/cu's sources:
 *
 * 1. CUDA 13 renamed entry points gorgonia.org/cu v0.9.6 calls in their
 *    old forms: cuCtxCreate is now cuCtxCreate_v4 with a
 *    CUctxCreateParams* argument, and cuMemAdvise/cuMemPrefetchAsync take
 *    a CUmemLocation instead of a CUdevice. The old spellings are mapped
 *    onto the new functions with the old semantics (no params; a device
 *    ordinal, or CU_DEVICE_CPU for the host).
 *
 * 2. gorgonia.org/cu calls cuInit in a package init and exits the process
 *    when it fails, so a CUDA build would die on a machine without a GPU
 *    before it could fall back to the CPU. Its init gets a no-op here;
 *    package trainer/compute/cuda calls the real cuInit in Open (it
 *    #undefs cuInit) and reports failure as an error.
 */
#ifndef RLHOST_CUDA_COMPAT_H
#define RLHOST_CUDA_COMPAT_H

#include_next <cuda.h>

#if defined(CUDA_VERSION) && CUDA_VERSION >= 13000
#undef cuCtxCreate
static inline CUresult rlhost_cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev) {
	return cuCtxCreate_v4(pctx, NULL, flags, dev);
}
#define cuCtxCreate rlhost_cuCtxCreate

static inline CUmemLocation rlhost_memLocation(CUdevice dev) {
	CUmemLocation loc;
	if (dev == CU_DEVICE_CPU) {
		loc.type = CU_MEM_LOCATION_TYPE_HOST;
		loc.id = 0;
	} else {
		loc.type = CU_MEM_LOCATION_TYPE_DEVICE;
		loc.id = dev;
	}
	return loc;
}

#undef cuMemAdvise
static inline CUresult rlhost_cuMemAdvise(CUdeviceptr p, size_t n, CUmem_advise advice, CUdevice dev) {
	return cuMemAdvise_v2(p, n, advice, rlhost_memLocation(dev));
}
#define cuMemAdvise rlhost_cuMemAdvise

#undef cuMemPrefetchAsync
static inline CUresult rlhost_cuMemPrefetchAsync(CUdeviceptr p, size_t n, CUdevice dev, CUstream s) {
	return cuMemPrefetchAsync_v2(p, n, rlhost_memLocation(dev), 0, s);
}
#define cuMemPrefetchAsync rlhost_cuMemPrefetchAsync

/* gorgonia names JIT targets for architectures CUDA 13 no longer builds
 * for; where the enumerators are gone, these give them their values
 * (CU_TARGET_COMPUTE_XY is XY), and where they remain they agree. */
#define CU_TARGET_COMPUTE_30 30
#define CU_TARGET_COMPUTE_32 32
#define CU_TARGET_COMPUTE_35 35
#define CU_TARGET_COMPUTE_37 37
#define CU_TARGET_COMPUTE_50 50
#define CU_TARGET_COMPUTE_52 52
#define CU_TARGET_COMPUTE_53 53
#define CU_TARGET_COMPUTE_60 60
#define CU_TARGET_COMPUTE_61 61
#define CU_TARGET_COMPUTE_62 62
#endif

static inline CUresult rlhost_deferredInit(unsigned int flags) {
	(void)flags;
	return CUDA_SUCCESS;
}
#define cuInit rlhost_deferredInit

#endif
