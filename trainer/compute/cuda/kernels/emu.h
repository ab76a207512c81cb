// emu.h declares the cudaemu entry points Go calls (emu.go).
#ifndef RLHOST_CUDA_EMU_H
#define RLHOST_CUDA_EMU_H
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
int emu_launch(const char* kernel, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, int nargs,
               const uint64_t* args);
void emu_sgemm(int transA, int transB, int m, int n, int k, float alpha, const float* A, int lda, const float* B, int ldb,
               float beta, float* C, int ldc);
void emu_gemm_bf16(int transA, int transB, int m, int n, int k, float alpha, const uint16_t* A, int lda, const uint16_t* B, int ldb,
                   float beta, float* C, int ldc);
#ifdef __cplusplus
}
#endif
#endif
