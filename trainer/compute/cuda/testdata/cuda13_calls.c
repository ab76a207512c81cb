/* Old-style calls as gorgonia.org/cu makes them, against the test
 * CUDA 13 header through the compat header; the definitions below record
 * what the new entry points receive. */
#include <stdio.h>
#include <cuda.h>

int main(void) {
	CUcontext c;
	printf("gorgonia cuInit -> %d\n", cuInit(0));
	cuCtxCreate(&c, 4u, 1);
	cuMemAdvise(64, 128, CU_MEM_ADVISE_SET_READ_MOSTLY, 2);
	cuMemAdvise(64, 128, CU_MEM_ADVISE_SET_READ_MOSTLY, CU_DEVICE_CPU);
	cuMemPrefetchAsync(64, 256, 3, (CUstream)0);
	printf("target %d %d\n", CU_TARGET_COMPUTE_30, CU_TARGET_COMPUTE_62);
	return 0;
}

/* The driver's side, below the compat header's macros. */
#undef cuInit
CUresult cuInit(unsigned int flags) { printf("real cuInit(%u)\n", flags); return 0; }
CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev) {
	(void)pctx;
	printf("cuCtxCreate_v4(params=%s, flags=%u, dev=%d)\n", params ? "set" : "NULL", flags, dev);
	return 0;
}
CUresult cuMemAdvise_v2(CUdeviceptr p, size_t n, CUmem_advise advice, CUmemLocation loc) {
	printf("cuMemAdvise_v2(%llu, %zu, %d, type=%d id=%d)\n", p, n, (int)advice, (int)loc.type, loc.id);
	return 0;
}
CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int flags, CUstream s) {
	printf("cuMemPrefetchAsync_v2(%llu, %zu, type=%d id=%d, flags=%u, stream=%p)\n", p, n, (int)loc.type, loc.id, flags, (void *)s);
	return 0;
}
