/* The shape of CUDA 13's cuda.h where it differs from what gorgonia.org/cu
 * v0.9.6 calls, written for compat_test.go: cuCtxCreate maps to
 * cuCtxCreate_v4 with a params argument, cuMemAdvise and
 * cuMemPrefetchAsync to forms taking a CUmemLocation. */
#ifndef TEST_CUDA13_H
#define TEST_CUDA13_H
#include <stddef.h>
#define CUDA_VERSION 13000
typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef unsigned long long CUdeviceptr;
typedef struct CUstream_st *CUstream;
typedef enum { CU_MEM_ADVISE_SET_READ_MOSTLY = 1 } CUmem_advise;
typedef enum { CU_MEM_LOCATION_TYPE_DEVICE = 1, CU_MEM_LOCATION_TYPE_HOST = 2 } CUmemLocationType;
typedef struct { CUmemLocationType type; int id; } CUmemLocation;
typedef struct CUctxCreateParams_st CUctxCreateParams;
typedef enum { CU_TARGET_COMPUTE_75 = 75 } CUjit_target;
#define CU_DEVICE_CPU ((CUdevice)-1)
#define CUDA_SUCCESS 0
#define cuCtxCreate cuCtxCreate_v4
#define cuMemAdvise cuMemAdvise_v2
#define cuMemPrefetchAsync cuMemPrefetchAsync_v2
CUresult cuInit(unsigned int flags);
CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev);
CUresult cuMemAdvise_v2(CUdeviceptr p, size_t n, CUmem_advise advice, CUmemLocation loc);
CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int flags, CUstream s);
#endif
