// shim.h maps the CUDA built-ins kernels.cuh uses onto plain C++ so the
// cudaemu build can run the kernels on the CPU. Every thread of a block
// is a fiber (ucontext); __syncthreads yields to the block's scheduler,
// which resumes the threads round-robin, so a block's threads interleave
// only at barriers, as the CUDA memory model allows. Blocks run one
// after another. __shared__ becomes static: one block runs at a time.
#ifndef RLHOST_CUDA_SHIM_H
#define RLHOST_CUDA_SHIM_H

#include <math.h>
#include <string.h>

struct dim3 {
	unsigned x, y, z;
};

extern dim3 threadIdx, blockIdx, blockDim, gridDim;

void __syncthreads();

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static


inline float __int_as_float(int i) {
	float f;
	memcpy(&f, &i, sizeof f);
	return f;
}

inline int __float_as_int(float f) {
	int i;
	memcpy(&i, &f, sizeof i);
	return i;
}

#endif
