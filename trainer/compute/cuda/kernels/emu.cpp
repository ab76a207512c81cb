//go:build cudaemu

// emu.cpp runs kernels.cuh on the CPU (see shim.h) and provides a
// column-major SGEMM with cuBLAS's semantics, for the cudaemu test build.
// _longjmp between fiber stacks is what the fortified longjmp rejects.
#undef _FORTIFY_SOURCE
#include "shim.h"
#include "kernels.cuh"

#include <setjmp.h>
#include <ucontext.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <tuple>
#include <utility>

#include "emu.h"

dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace {

// Each thread of a block is a fiber with its own stack. A fiber is started
// once (makecontext/swapcontext) and then loops: run the kernel body for
// whichever block is current, mark itself done, yield. Switching uses
// _setjmp/_longjmp, which, unlike swapcontext, saves no signal mask and so
// makes no system call: a block of 256 threads switches 256 times per
// barrier.
const size_t kStack = 64 << 10;

struct Fiber {
	jmp_buf jb;
	ucontext_t uc;
	char* stack;
	bool started, done;
};

jmp_buf sched;
Fiber fibers[1024];
int cur;
std::function<void()> body;

void yield() {
	if (!_setjmp(fibers[cur].jb)) _longjmp(sched, 1);
}

void fiber_main() {
	for (;;) {
		body();
		fibers[cur].done = true;
		yield();
	}
}

void resume(int t) {
	Fiber& f = fibers[t];
	cur = t;
	if (_setjmp(sched)) return;
	if (f.started) _longjmp(f.jb, 1);
	f.started = true;
	ucontext_t here;
	swapcontext(&here, &f.uc);  // never returns: the fiber jumps to sched
}

// run executes body for every thread of every block of the grid.
int run(dim3 grid, dim3 block) {
	int nt = block.x * block.y * block.z;
	if (nt < 1 || nt > 1024) return 1;
	gridDim = grid;
	blockDim = block;
	for (int t = 0; t < nt; t++) {
		Fiber& f = fibers[t];
		if (f.stack) continue;
		f.stack = (char*)malloc(kStack);
		getcontext(&f.uc);
		f.uc.uc_stack.ss_sp = f.stack;
		f.uc.uc_stack.ss_size = kStack;
		f.uc.uc_link = nullptr;
		makecontext(&f.uc, fiber_main, 0);
	}
	for (unsigned bz = 0; bz < grid.z; bz++)
		for (unsigned by = 0; by < grid.y; by++)
			for (unsigned bx = 0; bx < grid.x; bx++) {
				blockIdx = dim3{bx, by, bz};
				for (int t = 0; t < nt; t++) fibers[t].done = false;
				for (int live = nt; live > 0;) {
					for (int t = 0; t < nt; t++) {
						if (fibers[t].done) continue;
						threadIdx = dim3{unsigned(t % block.x), unsigned(t / block.x % block.y), unsigned(t / (block.x * block.y))};
						resume(t);
						if (fibers[t].done) live--;
					}
				}
			}
	return 0;
}

template <typename T>
T arg(const uint64_t* a, size_t i) {
	T v;
	std::memcpy(&v, &a[i], sizeof v);
	return v;
}

template <typename... A, size_t... I>
void bind_args(void (*k)(A...), const uint64_t* a, std::index_sequence<I...>) {
	std::tuple<A...> vals{arg<A>(a, I)...};
	body = [k, vals] { std::apply(k, vals); };
}

template <typename... A>
int launch(void (*k)(A...), int nargs, const uint64_t* a, dim3 g, dim3 b) {
	if (nargs != (int)sizeof...(A)) return 2;
	bind_args(k, a, std::index_sequence_for<A...>{});
	return run(g, b);
}

}  // namespace

void __syncthreads() { yield(); }

#define K(name) \
	if (std::strcmp(kernel, #name) == 0) return launch(name, nargs, args, g, b);

extern "C" int emu_launch(const char* kernel, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                          int nargs, const uint64_t* args) {
	dim3 g{gx, gy, gz}, b{bx, by, bz};
	K(k_fill)
	K(k_copy)
	K(k_add)
	K(k_accumulate)
	K(k_scale)
	K(k_mul)
	K(k_sumsq)
	K(k_add_bias)
	K(k_rmsnorm)
	K(k_rmsnorm_bwd_dx)
	K(k_rope)
	K(k_attn_fwd)
	K(k_attn_fwd_tiled)
	K(k_attn_bwd_ds)
	K(k_attn_bwd_dq)
	K(k_attn_bwd_dkv)
	K(k_attn_bwd_ds_tiled)
	K(k_attn_bwd_dq_tiled)
	K(k_attn_bwd_dkv_tiled)
	K(k_attn_cached)
	K(k_write_cache)
	K(k_swiglu)
	K(k_swiglu_bwd)
	K(k_embed)
	K(k_embed_bwd)
	K(k_logprobs)
	K(k_logprobs_bwd)
	K(k_adamw)
	K(k_sample)
	K(k_to_bf16)
	K(k_from_bf16)
	K(k_flash_fwd)
	K(k_flash_bwd_delta)
	K(k_flash_bwd_dq)
	K(k_flash_bwd_dkv)
	return 3;
}

// emu_sgemm is cublasSgemm for column-major data: C = alpha op(A) op(B) + beta C.
extern "C" void emu_sgemm(int transA, int transB, int m, int n, int k, float alpha, const float* A, int lda, const float* B, int ldb,
                          float beta, float* C, int ldc) {
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++) {
			float s = 0;
			for (int p = 0; p < k; p++) {
				float a = transA ? A[p + (long long)i * lda] : A[i + (long long)p * lda];
				float bv = transB ? B[j + (long long)p * ldb] : B[p + (long long)j * ldb];
				s += a * bv;
			}
			float* c = &C[i + (long long)j * ldc];
			*c = beta == 0 ? alpha * s : alpha * s + beta * *c;
		}
}

static float bf16_to_float(uint16_t h) {
	uint32_t u = (uint32_t)h << 16;
	float f;
	std::memcpy(&f, &u, sizeof f);
	return f;
}

// emu_gemm_bf16 is cublasGemmEx with BF16 A and B, FP32 C and FP32
// accumulation: each product of two BF16 values is exact in FP32, and the
// sum is accumulated in FP32, as CUBLAS_COMPUTE_32F does (in some order).
extern "C" void emu_gemm_bf16(int transA, int transB, int m, int n, int k, float alpha, const uint16_t* A, int lda, const uint16_t* B,
                              int ldb, float beta, float* C, int ldc) {
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++) {
			float s = 0;
			for (int p = 0; p < k; p++) {
				float a = bf16_to_float(transA ? A[p + (long long)i * lda] : A[i + (long long)p * lda]);
				float bv = bf16_to_float(transB ? B[j + (long long)p * ldb] : B[p + (long long)j * ldb]);
				s += a * bv;
			}
			float* c = &C[i + (long long)j * ldc];
			*c = beta == 0 ? alpha * s : alpha * s + beta * *c;
		}
}
