/* Declarations NVRTC provides implicitly, for compiling kernels.cuh with
 * clang's CUDA front end without a CUDA SDK (-nocudainc -nocudalib). */
#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define __forceinline__ __inline__ __attribute__((always_inline))
#include "__clang_cuda_builtin_vars.h"
__device__ float expf(float);
__device__ float sqrtf(float);
__device__ float fmaxf(float, float);
__device__ double exp(double);
__device__ double log(double);
__device__ double sqrt(double);
__device__ double cos(double);
__device__ double sin(double);
__device__ inline float __int_as_float(int i) { return __nvvm_bitcast_i2f(i); }
__device__ inline int __float_as_int(float f) { return __nvvm_bitcast_f2i(f); }
