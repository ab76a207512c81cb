// FP32 kernels of rlhost's CUDA backend. NVRTC compiles this file at run
// time (package cuda); the cudaemu build compiles the same text as C++ on
// the CPU to check the kernels' logic against the CPU backend. So the file
// includes nothing, uses only what both sides provide (shim.h maps the
// CUDA built-ins for the CPU), and every kernel that reduces uses blocks of
// exactly NT threads and __syncthreads-based tree reductions.
//
// Layout conventions are those of trainer/backend: row-major, a row is a
// token; backward kernels accumulate into gradients unless noted.

#define NT 256

typedef unsigned long long u64;

__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }

__device__ __forceinline__ float neg_inf() { return -__int_as_float(0x7f800000); }

__device__ __forceinline__ float block_max(float v, float* red) {
	int t = threadIdx.x;
	red[t] = v;
	__syncthreads();
	for (int s = NT / 2; s > 0; s >>= 1) {
		if (t < s) red[t] = fmaxf(red[t], red[t + s]);
		__syncthreads();
	}
	float r = red[0];
	__syncthreads();
	return r;
}

__device__ __forceinline__ float block_sum(float v, float* red) {
	int t = threadIdx.x;
	red[t] = v;
	__syncthreads();
	for (int s = NT / 2; s > 0; s >>= 1) {
		if (t < s) red[t] += red[t + s];
		__syncthreads();
	}
	float r = red[0];
	__syncthreads();
	return r;
}

__device__ __forceinline__ double block_sumd(double v, double* red) {
	int t = threadIdx.x;
	red[t] = v;
	__syncthreads();
	for (int s = NT / 2; s > 0; s >>= 1) {
		if (t < s) red[t] += red[t + s];
		__syncthreads();
	}
	double r = red[0];
	__syncthreads();
	return r;
}

// Rows of d outputs (one per head dimension e) summed over a range of j
// use every thread of the block: thread t owns e = t % d and every G-th j
// starting at t / d, where G = NT / d; the G partial sums are then added in
// group order (deterministic). When d does not divide NT, one group of NT
// threads strides over e instead (G = 1).
__device__ __forceinline__ int row_groups(int d) { return (d <= NT && NT % d == 0) ? NT / d : 1; }

// group_sum adds the G partials of output e; every thread must call it.
// Threads with e < d of group 0 get the total (others get garbage).
__device__ __forceinline__ float group_sum(float acc, int d, float* red) {
	int G = row_groups(d), t = threadIdx.x;
	if (G == 1) return acc;
	red[t] = acc;
	__syncthreads();
	float s = 0;
	if (t < d)
		for (int g = 0; g < G; g++) s += red[g * d + t];
	__syncthreads();
	return s;
}

#define GRID_STRIDE(i, n) for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (long long)blockDim.x * gridDim.x)

// ---- elementwise ----

extern "C" __global__ void k_fill(float* x, float v, int n) {
	GRID_STRIDE(i, n) x[i] = v;
}

extern "C" __global__ void k_copy(float* dst, const float* src, int n) {
	GRID_STRIDE(i, n) dst[i] = src[i];
}

extern "C" __global__ void k_add(float* out, const float* a, const float* b, int n) {
	GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}

extern "C" __global__ void k_accumulate(float* dst, const float* src, int n) {
	GRID_STRIDE(i, n) dst[i] += src[i];
}

extern "C" __global__ void k_mul(float* out, const float* a, const float* b, int n) {
	GRID_STRIDE(i, n) out[i] = a[i] * b[i];
}

extern "C" __global__ void k_scale(float* x, float s, int n) {
	GRID_STRIDE(i, n) x[i] *= s;
}

// k_sumsq writes one float64 partial sum of squares per block; the host
// adds the partials in block order, so the result is deterministic.
extern "C" __global__ void k_sumsq(const float* x, int n, double* part) {
	__shared__ double red[NT];
	double s = 0;
	GRID_STRIDE(i, n) s += (double)x[i] * (double)x[i];
	s = block_sumd(s, red);
	if (threadIdx.x == 0) part[blockIdx.x] = s;
}

// ---- bias (its backward is a GEMV on cuBLAS) ----

extern "C" __global__ void k_add_bias(float* x, const float* bias, int rows, int cols) {
	GRID_STRIDE(i, (long long)rows * cols) x[i] += bias[i % cols];
}

// ---- RMSNorm: one block per row ----

extern "C" __global__ void k_rmsnorm(float* out, float* rstd, const float* x, const float* w, int dim, float eps) {
	__shared__ double red[NT];
	int r = blockIdx.x;
	const float* xr = x + (long long)r * dim;
	float* o = out + (long long)r * dim;
	double ss = 0;
	for (int i = threadIdx.x; i < dim; i += NT) ss += (double)xr[i] * (double)xr[i];
	ss = block_sumd(ss, red);
	float s = (float)(1.0 / sqrt(ss / dim + (double)eps));
	if (threadIdx.x == 0) rstd[r] = s;
	for (int i = threadIdx.x; i < dim; i += NT) o[i] = w[i] * (xr[i] * s);
}

extern "C" __global__ void k_rmsnorm_bwd_dx(float* dx, const float* dout, const float* x, const float* w, const float* rstd, int dim) {
	__shared__ float red[NT];
	int r = blockIdx.x;
	const float* xr = x + (long long)r * dim;
	const float* g = dout + (long long)r * dim;
	float* d = dx + (long long)r * dim;
	float s = rstd[r];
	float dot = 0;
	for (int i = threadIdx.x; i < dim; i += NT) dot += w[i] * g[i] * xr[i];
	dot = block_sum(dot, red);
	float c = s * s * s * dot / dim;
	for (int i = threadIdx.x; i < dim; i += NT) d[i] += s * w[i] * g[i] - c * xr[i];
}

// ---- RoPE (rotate_half layout), in place. invfreq is computed on the
// host exactly as the CPU backend does; sign -1 is the backward. ----

extern "C" __global__ void k_rope(float* x, const int* pos, const float* invfreq, int rows, int heads, int hd, float sign) {
	int half = hd / 2;
	GRID_STRIDE(t, (long long)rows * half) {
		int r = (int)(t / half), i = (int)(t % half);
		float ang = (float)pos[r] * invfreq[i];
		float c = (float)cos((double)ang), s = sign * (float)sin((double)ang);
		for (int h = 0; h < heads; h++) {
			float* v = x + ((long long)r * heads + h) * hd;
			float x1 = v[i], x2 = v[i + half];
			v[i] = x1 * c - x2 * s;
			v[i + half] = x2 * c + x1 * s;
		}
	}
}

// ---- causal GQA attention. Grid (T, hq, B), one block per query row.
// att[B,hq,T,T] keeps the probabilities for the backward. ----

extern "C" __global__ void k_attn_fwd(float* out, float* att, const float* q, const float* k, const float* v, const int* lens,
                                      int T, int hq, int hkv, int d, float scale) {
	__shared__ float red[NT];
	int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
	int g = h / (hq / hkv), n = lens[b];
	float* P = att + (((long long)b * hq + h) * T + i) * T;
	float* o = out + (((long long)b * T + i) * hq + h) * d;
	if (i >= n) {
		for (int j = threadIdx.x; j < T; j += NT) P[j] = 0;
		for (int e = threadIdx.x; e < d; e += NT) o[e] = 0;
		return;
	}
	const float* qi = q + (((long long)b * T + i) * hq + h) * d;
	float mx = neg_inf();
	for (int j = threadIdx.x; j <= i; j += NT) {
		const float* kj = k + (((long long)b * T + j) * hkv + g) * d;
		float s = 0;
		for (int e = 0; e < d; e++) s += qi[e] * kj[e];
		s *= scale;
		P[j] = s;
		mx = fmaxf(mx, s);
	}
	mx = block_max(mx, red);
	float sum = 0;
	for (int j = threadIdx.x; j <= i; j += NT) {
		float e = expf(P[j] - mx);
		P[j] = e;
		sum += e;
	}
	sum = block_sum(sum, red);
	float inv = 1.0f / sum;
	for (int j = threadIdx.x; j < T; j += NT) P[j] = j <= i ? P[j] * inv : 0.0f;
	__syncthreads();
	int G = row_groups(d);
	if (G > 1) {
		int e = threadIdx.x % d;
		float acc = 0;
		for (int j = threadIdx.x / d; j <= i; j += G) acc += P[j] * v[(((long long)b * T + j) * hkv + g) * d + e];
		acc = group_sum(acc, d, red);
		if ((int)threadIdx.x < d) o[e] = acc;
		return;
	}
	for (int e = threadIdx.x; e < d; e += NT) {
		float acc = 0;
		for (int j = 0; j <= i; j++) acc += P[j] * v[(((long long)b * T + j) * hkv + g) * d + e];
		o[e] = acc;
	}
}

// k_attn_fwd_tiled is k_attn_fwd for head dims up to ATT_DMAX: one block
// per tile of ATT_QT query rows, so each key and value row is read once per
// tile instead of once per query row. Grid (ceil(T/ATT_QT), hq, B).
// Scores go to att, which then holds exactly what k_attn_fwd writes.
#define ATT_QT 16
#define ATT_KT 16
#define ATT_DMAX 128

extern "C" __global__ void k_attn_fwd_tiled(float* out, float* att, const float* q, const float* k, const float* v, const int* lens,
                                            int T, int hq, int hkv, int d, float scale) {
	__shared__ float Qs[ATT_QT][ATT_DMAX + 1];
	__shared__ float KVs[ATT_KT][ATT_DMAX + 1];
	__shared__ float rowred[ATT_QT][ATT_KT];
	int h = blockIdx.y, b = blockIdx.z, t = threadIdx.x;
	int g = h / (hq / hkv), n = lens[b], i0 = blockIdx.x * ATT_QT;
	int rows = imin(ATT_QT, T - i0);
	int r = t / ATT_KT, c = t % ATT_KT;  // score mapping: row r, key c of a tile
	int i = i0 + r;
	float* P = att + (((long long)b * hq + h) * T + i) * T;  // valid when r < rows
	for (int x = t; x < ATT_QT * d; x += NT) {
		int qr = x / d, e = x % d;
		Qs[qr][e] = i0 + qr < n ? q[(((long long)b * T + i0 + qr) * hq + h) * d + e] : 0.0f;
	}
	// Pass 1: scores of every key tile the tile's last real row can see.
	int last = i0 < n ? imin(i0 + rows, n) - 1 : -1;
	float mx = neg_inf();
	for (int k0 = 0; k0 <= last; k0 += ATT_KT) {
		__syncthreads();
		for (int x = t; x < ATT_KT * d; x += NT) {
			int kr = x / d, e = x % d;
			KVs[kr][e] = k0 + kr < n ? k[(((long long)b * T + k0 + kr) * hkv + g) * d + e] : 0.0f;
		}
		__syncthreads();
		int j = k0 + c;
		if (r < rows && i < n && j <= i) {
			float s = 0;
			for (int e = 0; e < d; e++) s += Qs[r][e] * KVs[c][e];
			s *= scale;
			P[j] = s;
			mx = fmaxf(mx, s);
		}
	}
	// Row max and sum over the ATT_KT threads of each row, in column order.
	rowred[r][c] = mx;
	__syncthreads();
	mx = neg_inf();
	for (int x = 0; x < ATT_KT; x++) mx = fmaxf(mx, rowred[r][x]);
	__syncthreads();
	float sum = 0;
	if (r < rows && i < n)
		for (int j = c; j <= i; j += ATT_KT) {
			float e = expf(P[j] - mx);
			P[j] = e;
			sum += e;
		}
	rowred[r][c] = sum;
	__syncthreads();
	sum = 0;
	for (int x = 0; x < ATT_KT; x++) sum += rowred[r][x];
	if (r < rows) {
		float inv = 1.0f / sum;
		for (int j = c; j < T; j += ATT_KT) P[j] = (i < n && j <= i) ? P[j] * inv : 0.0f;
	}
	// Pass 2: O = P·V over value tiles; thread t owns pairs x = t + p·NT.
	float acc[ATT_QT * ATT_DMAX / NT];
	for (int p = 0; p < ATT_QT * ATT_DMAX / NT; p++) acc[p] = 0;
	for (int k0 = 0; k0 <= last; k0 += ATT_KT) {
		__syncthreads();
		for (int x = t; x < ATT_KT * d; x += NT) {
			int kr = x / d, e = x % d;
			KVs[kr][e] = k0 + kr < n ? v[(((long long)b * T + k0 + kr) * hkv + g) * d + e] : 0.0f;
		}
		__syncthreads();
		for (int p = 0, x = t; x < ATT_QT * d; p++, x += NT) {
			int orow = x / d, e = x % d, oi = i0 + orow;
			if (orow >= rows || oi >= n) continue;
			const float* Pr = att + (((long long)b * hq + h) * T + oi) * T;
			float a = acc[p];
			for (int cc = 0; cc < ATT_KT && k0 + cc <= oi; cc++) a += Pr[k0 + cc] * KVs[cc][e];
			acc[p] = a;
		}
	}
	for (int p = 0, x = t; x < ATT_QT * d; p++, x += NT) {
		int orow = x / d, e = x % d, oi = i0 + orow;
		if (orow < rows) out[(((long long)b * T + oi) * hq + h) * d + e] = oi < n ? acc[p] : 0.0f;
	}
}

// dS = P ⊙ (dP − rowsum(P ⊙ dP)) · scale with dP = dO·Vᵀ, one block per
// query row; ds has att's layout and is overwritten.
extern "C" __global__ void k_attn_bwd_ds(float* ds, const float* dout, const float* v, const float* att, const int* lens,
                                         int T, int hq, int hkv, int d, float scale) {
	__shared__ float red[NT];
	int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
	int g = h / (hq / hkv), n = lens[b];
	long long row = (((long long)b * hq + h) * T + i) * T;
	const float* P = att + row;
	float* S = ds + row;
	if (i >= n) {
		for (int j = threadIdx.x; j < T; j += NT) S[j] = 0;
		return;
	}
	const float* gi = dout + (((long long)b * T + i) * hq + h) * d;
	float dot = 0;
	for (int j = threadIdx.x; j <= i; j += NT) {
		const float* vj = v + (((long long)b * T + j) * hkv + g) * d;
		float dp = 0;
		for (int e = 0; e < d; e++) dp += gi[e] * vj[e];
		S[j] = dp;
		dot += P[j] * dp;
	}
	dot = block_sum(dot, red);
	for (int j = threadIdx.x; j < T; j += NT) S[j] = j <= i ? P[j] * (S[j] - dot) * scale : 0.0f;
}

// dQ[i] += Σ_j dS[i,j] K[j], one block per query row, threads over d.
extern "C" __global__ void k_attn_bwd_dq(float* dq, const float* ds, const float* k, const int* lens, int T, int hq, int hkv, int d) {
	__shared__ float red[NT];
	int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
	int g = h / (hq / hkv), n = lens[b];
	if (i >= n) return;
	const float* S = ds + (((long long)b * hq + h) * T + i) * T;
	float* o = dq + (((long long)b * T + i) * hq + h) * d;
	int G = row_groups(d);
	if (G > 1) {
		int e = threadIdx.x % d;
		float acc = 0;
		for (int j = threadIdx.x / d; j <= i; j += G) acc += S[j] * k[(((long long)b * T + j) * hkv + g) * d + e];
		acc = group_sum(acc, d, red);
		if ((int)threadIdx.x < d) o[e] += acc;
		return;
	}
	for (int e = threadIdx.x; e < d; e += NT) {
		float acc = 0;
		for (int j = 0; j <= i; j++) acc += S[j] * k[(((long long)b * T + j) * hkv + g) * d + e];
		o[e] += acc;
	}
}

// dK[j] += Σ_{h in group} Σ_{i≥j} dS[h,i,j] Q[i,h] and dV[j] likewise
// with P and dO: one block per key row and kv head, so the query heads of
// a group are summed without atomics.
extern "C" __global__ void k_attn_bwd_dkv(float* dk, float* dv, const float* ds, const float* att, const float* q, const float* dout,
                                          const int* lens, int T, int hq, int hkv, int d) {
	__shared__ float red[NT];
	int j = blockIdx.x, g = blockIdx.y, b = blockIdx.z;
	int grp = hq / hkv, n = lens[b];
	if (j >= n) return;
	int G = row_groups(d);
	if (G > 1) {
		int e = threadIdx.x % d;
		float ak = 0, av = 0;
		for (int hh = 0; hh < grp; hh++) {
			int h = g * grp + hh;
			long long base = ((long long)b * hq + h) * T;
			for (int i = j + threadIdx.x / d; i < n; i += G) {
				long long qi = (((long long)b * T + i) * hq + h) * d + e;
				ak += ds[(base + i) * T + j] * q[qi];
				av += att[(base + i) * T + j] * dout[qi];
			}
		}
		ak = group_sum(ak, d, red);
		av = group_sum(av, d, red);
		if ((int)threadIdx.x < d) {
			long long o = (((long long)b * T + j) * hkv + g) * d + e;
			dk[o] += ak;
			dv[o] += av;
		}
		return;
	}
	for (int e = threadIdx.x; e < d; e += NT) {
		float ak = 0, av = 0;
		for (int hh = 0; hh < grp; hh++) {
			int h = g * grp + hh;
			long long base = ((long long)b * hq + h) * T;
			for (int i = j; i < n; i++) {
				long long qi = (((long long)b * T + i) * hq + h) * d + e;
				ak += ds[(base + i) * T + j] * q[qi];
				av += att[(base + i) * T + j] * dout[qi];
			}
		}
		long long o = (((long long)b * T + j) * hkv + g) * d + e;
		dk[o] += ak;
		dv[o] += av;
	}
}

// The backward for head dims up to ATT_DMAX, tiled like k_attn_fwd_tiled.
// k_attn_bwd_ds_tiled: dS for a tile of ATT_QT query rows. Grid
// (ceil(T/ATT_QT), hq, B).
extern "C" __global__ void k_attn_bwd_ds_tiled(float* ds, const float* dout, const float* v, const float* att, const int* lens,
                                               int T, int hq, int hkv, int d, float scale) {
	__shared__ float Gs[ATT_QT][ATT_DMAX + 1];
	__shared__ float Vs[ATT_KT][ATT_DMAX + 1];
	__shared__ float rowred[ATT_QT][ATT_KT];
	int h = blockIdx.y, b = blockIdx.z, t = threadIdx.x;
	int g = h / (hq / hkv), n = lens[b], i0 = blockIdx.x * ATT_QT;
	int rows = imin(ATT_QT, T - i0);
	int r = t / ATT_KT, c = t % ATT_KT, i = i0 + r;
	long long row = (((long long)b * hq + h) * T + i) * T;
	for (int x = t; x < ATT_QT * d; x += NT) {
		int qr = x / d, e = x % d;
		Gs[qr][e] = i0 + qr < n ? dout[(((long long)b * T + i0 + qr) * hq + h) * d + e] : 0.0f;
	}
	int last = i0 < n ? imin(i0 + rows, n) - 1 : -1;
	float dot = 0;
	for (int k0 = 0; k0 <= last; k0 += ATT_KT) {
		__syncthreads();
		for (int x = t; x < ATT_KT * d; x += NT) {
			int kr = x / d, e = x % d;
			Vs[kr][e] = k0 + kr < n ? v[(((long long)b * T + k0 + kr) * hkv + g) * d + e] : 0.0f;
		}
		__syncthreads();
		int j = k0 + c;
		if (r < rows && i < n && j <= i) {
			float dp = 0;
			for (int e = 0; e < d; e++) dp += Gs[r][e] * Vs[c][e];
			ds[row + j] = dp;
			dot += att[row + j] * dp;
		}
	}
	rowred[r][c] = dot;
	__syncthreads();
	dot = 0;
	for (int x = 0; x < ATT_KT; x++) dot += rowred[r][x];
	if (r < rows)
		for (int j = c; j < T; j += ATT_KT) ds[row + j] = (i < n && j <= i) ? att[row + j] * (ds[row + j] - dot) * scale : 0.0f;
}

// dQ += dS·K for a tile of query rows, K in shared-memory tiles.
extern "C" __global__ void k_attn_bwd_dq_tiled(float* dq, const float* ds, const float* k, const int* lens, int T, int hq, int hkv, int d) {
	__shared__ float Ks[ATT_KT][ATT_DMAX + 1];
	int h = blockIdx.y, b = blockIdx.z, t = threadIdx.x;
	int g = h / (hq / hkv), n = lens[b], i0 = blockIdx.x * ATT_QT;
	int rows = imin(ATT_QT, T - i0);
	int last = i0 < n ? imin(i0 + rows, n) - 1 : -1;
	float acc[ATT_QT * ATT_DMAX / NT];
	for (int p = 0; p < ATT_QT * ATT_DMAX / NT; p++) acc[p] = 0;
	for (int k0 = 0; k0 <= last; k0 += ATT_KT) {
		__syncthreads();
		for (int x = t; x < ATT_KT * d; x += NT) {
			int kr = x / d, e = x % d;
			Ks[kr][e] = k0 + kr < n ? k[(((long long)b * T + k0 + kr) * hkv + g) * d + e] : 0.0f;
		}
		__syncthreads();
		for (int p = 0, x = t; x < ATT_QT * d; p++, x += NT) {
			int orow = x / d, e = x % d, oi = i0 + orow;
			if (orow >= rows || oi >= n) continue;
			const float* S = ds + (((long long)b * hq + h) * T + oi) * T;
			float a = acc[p];
			for (int cc = 0; cc < ATT_KT && k0 + cc <= oi; cc++) a += S[k0 + cc] * Ks[cc][e];
			acc[p] = a;
		}
	}
	for (int p = 0, x = t; x < ATT_QT * d; p++, x += NT) {
		int orow = x / d, e = x % d, oi = i0 + orow;
		if (orow < rows && oi < n) dq[(((long long)b * T + oi) * hq + h) * d + e] += acc[p];
	}
}

// dK += Σ_h dSᵀ·Q and dV += Σ_h Pᵀ·dO for a tile of ATT_KT key rows of kv
// head g, over the query heads of its group and tiles of query rows i ≥ j
// (dS and P are zero above the diagonal). Grid (ceil(T/ATT_KT), hkv, B).
extern "C" __global__ void k_attn_bwd_dkv_tiled(float* dk, float* dv, const float* ds, const float* att, const float* q,
                                                const float* dout, const int* lens, int T, int hq, int hkv, int d) {
	__shared__ float Qs[ATT_QT][ATT_DMAX + 1];
	__shared__ float Gs[ATT_QT][ATT_DMAX + 1];
	int g = blockIdx.y, b = blockIdx.z, t = threadIdx.x;
	int grp = hq / hkv, n = lens[b], j0 = blockIdx.x * ATT_KT;
	if (j0 >= n) return;
	int jrows = imin(ATT_KT, T - j0);
	float ak[ATT_KT * ATT_DMAX / NT], av[ATT_KT * ATT_DMAX / NT];
	for (int p = 0; p < ATT_KT * ATT_DMAX / NT; p++) ak[p] = 0, av[p] = 0;
	for (int hh = 0; hh < grp; hh++) {
		int h = g * grp + hh;
		long long base = ((long long)b * hq + h) * T;
		for (int i0 = j0; i0 < n; i0 += ATT_QT) {
			__syncthreads();
			for (int x = t; x < ATT_QT * d; x += NT) {
				int qr = x / d, e = x % d;
				long long qi = (((long long)b * T + i0 + qr) * hq + h) * d + e;
				bool in = i0 + qr < n;
				Qs[qr][e] = in ? q[qi] : 0.0f;
				Gs[qr][e] = in ? dout[qi] : 0.0f;
			}
			__syncthreads();
			for (int p = 0, x = t; x < ATT_KT * d; p++, x += NT) {
				int krow = x / d, e = x % d, j = j0 + krow;
				if (krow >= jrows || j >= n) continue;
				float a = ak[p], c = av[p];
				for (int rr = 0; rr < ATT_QT && i0 + rr < n; rr++) {
					long long at = (base + i0 + rr) * T + j;
					a += ds[at] * Qs[rr][e];
					c += att[at] * Gs[rr][e];
				}
				ak[p] = a;
				av[p] = c;
			}
		}
	}
	for (int p = 0, x = t; x < ATT_KT * d; p++, x += NT) {
		int krow = x / d, e = x % d, j = j0 + krow;
		if (krow >= jrows || j >= n) continue;
		long long o = (((long long)b * T + j) * hkv + g) * d + e;
		dk[o] += ak[p];
		dv[o] += av[p];
	}
}

// ---- generation: attention over a KV cache [B,maxT,hkv,d]. Grid (tq,
// hq, B); sc is scratch of B*hq*tq*maxT floats. ----

extern "C" __global__ void k_attn_cached(float* out, float* sc, const float* q, const float* kc, const float* vc, const int* start,
                                         int tq, int maxT, int hq, int hkv, int d, float scale) {
	__shared__ float red[NT];
	int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
	int g = h / (hq / hkv), n = start[b] + i + 1;
	float* S = sc + (((long long)b * hq + h) * tq + i) * maxT;
	const float* qi = q + (((long long)b * tq + i) * hq + h) * d;
	float* o = out + (((long long)b * tq + i) * hq + h) * d;
	float mx = neg_inf();
	for (int j = threadIdx.x; j < n; j += NT) {
		const float* kj = kc + (((long long)b * maxT + j) * hkv + g) * d;
		float s = 0;
		for (int e = 0; e < d; e++) s += qi[e] * kj[e];
		s *= scale;
		S[j] = s;
		mx = fmaxf(mx, s);
	}
	mx = block_max(mx, red);
	float sum = 0;
	for (int j = threadIdx.x; j < n; j += NT) {
		float e = expf(S[j] - mx);
		S[j] = e;
		sum += e;
	}
	sum = block_sum(sum, red);
	float inv = 1.0f / sum;
	__syncthreads();
	int G = row_groups(d);
	if (G > 1) {
		int e = threadIdx.x % d;
		float acc = 0;
		for (int j = threadIdx.x / d; j < n; j += G) acc += S[j] * inv * vc[(((long long)b * maxT + j) * hkv + g) * d + e];
		acc = group_sum(acc, d, red);
		if ((int)threadIdx.x < d) o[e] = acc;
		return;
	}
	for (int e = threadIdx.x; e < d; e += NT) {
		float acc = 0;
		for (int j = 0; j < n; j++) acc += S[j] * inv * vc[(((long long)b * maxT + j) * hkv + g) * d + e];
		o[e] = acc;
	}
}

extern "C" __global__ void k_write_cache(float* cache, const float* x, const int* start, int B, int tq, int maxT, int width) {
	GRID_STRIDE(t, (long long)B * tq * width) {
		long long c = t % width, r = t / width;
		int b = (int)(r / tq), i = (int)(r % tq);
		cache[((long long)b * maxT + start[b] + i) * width + c] = x[t];
	}
}

// ---- SwiGLU ----

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

extern "C" __global__ void k_swiglu(float* out, const float* gate, const float* up, int n) {
	GRID_STRIDE(i, n) {
		float x = gate[i];
		out[i] = x * sigmoidf_(x) * up[i];
	}
}

extern "C" __global__ void k_swiglu_bwd(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int n) {
	GRID_STRIDE(i, n) {
		float x = gate[i], s = sigmoidf_(x), g = dout[i];
		dup[i] += g * (x * s);
		dgate[i] += g * up[i] * (s * (1.0f + x * (1.0f - s)));
	}
}

// ---- embedding ----

extern "C" __global__ void k_embed(float* out, const float* table, const int* ids, int rows, int dim) {
	GRID_STRIDE(t, (long long)rows * dim) {
		long long r = t / dim, c = t % dim;
		out[t] = table[(long long)ids[r] * dim + c];
	}
}

// One thread per column, rows in order, so repeated ids never race.
extern "C" __global__ void k_embed_bwd(float* dtable, const float* dout, const int* ids, int rows, int dim) {
	int c = blockIdx.x * blockDim.x + threadIdx.x;
	if (c >= dim) return;
	for (int r = 0; r < rows; r++) dtable[(long long)ids[r] * dim + c] += dout[(long long)r * dim + c];
}

// ---- log-softmax + gather with temperature: one block per row ----

extern "C" __global__ void k_logprobs(float* logp, float* lse, const float* logits, const int* targets, int vocab, float invTemp) {
	__shared__ float red[NT];
	__shared__ double redd[NT];
	int r = blockIdx.x, t = targets[r];
	if (t < 0) {
		if (threadIdx.x == 0) logp[r] = 0, lse[r] = 0;
		return;
	}
	const float* z = logits + (long long)r * vocab;
	double it = invTemp;
	float mx = neg_inf();
	for (int j = threadIdx.x; j < vocab; j += NT) mx = fmaxf(mx, (float)(z[j] * it));
	mx = block_max(mx, red);
	double s = 0;
	for (int j = threadIdx.x; j < vocab; j += NT) s += exp(z[j] * it - mx);
	s = block_sumd(s, redd);
	double l = mx + log(s);
	if (threadIdx.x == 0) {
		lse[r] = (float)l;
		logp[r] = (float)(z[t] * it - l);
	}
}

// Overwrites dlogits (which may alias logits: each element is read and
// written by the same thread).
extern "C" __global__ void k_logprobs_bwd(float* dlogits, const float* dlogp, const float* logits, const float* lse, const int* targets,
                                          int vocab, float invTemp) {
	int r = blockIdx.x, t = targets[r];
	float* dz = dlogits + (long long)r * vocab;
	const float* z = logits + (long long)r * vocab;
	float gf = dlogp[r];
	if (t < 0 || gf == 0.0f) {
		for (int j = threadIdx.x; j < vocab; j += blockDim.x) dz[j] = 0;
		return;
	}
	double it = invTemp, gr = gf * it, l = lse[r];
	for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
		float v = (float)(-gr * exp(z[j] * it - l));
		if (j == t) v += (float)gr;
		dz[j] = v;
	}
}

// ---- AdamW (torch.optim.AdamW); step, sq and decay come from the host as
// the CPU backend computes them. ----

extern "C" __global__ void k_adamw(float* p, const float* g, float* m, float* v, int n, float step, float sq, float decay,
                                   float b1, float b2, float eps) {
	GRID_STRIDE(i, n) {
		float pi = p[i] * decay;
		float gi = g[i];
		float mi = b1 * m[i] + (1.0f - b1) * gi;
		float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
		m[i] = mi;
		v[i] = vi;
		p[i] = pi - step * mi / (sqrtf(vi) / sq + eps);
	}
}

// ---- sampling (generation keeps the logits on the device) ----

// Philox4x32-10 (Salmon et al., SC'11): ten rounds of a keyed bijection on
// a 128-bit counter. Counter (step, 0, stream, 0) and key (seed) make each
// sequence's draws a pure function of (seed, sequence, token index), so
// they do not depend on the batch or the launch geometry.
__device__ __forceinline__ void philox4x32_10(unsigned c[4], unsigned k0, unsigned k1) {
	for (int i = 0; i < 10; i++) {
		u64 p0 = (u64)0xD2511F53u * c[0], p1 = (u64)0xCD9E8D57u * c[2];
		unsigned n0 = (unsigned)(p1 >> 32) ^ c[1] ^ k0, n2 = (unsigned)(p0 >> 32) ^ c[3] ^ k1;
		c[0] = n0, c[1] = (unsigned)p1, c[2] = n2, c[3] = (unsigned)p0;
		k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
	}
}

// uniform53 is a double in [0,1) from the top 53 bits of Philox's first
// two output words.
__device__ __forceinline__ double uniform53(unsigned seedLo, unsigned seedHi, int stream, int step) {
	unsigned c[4] = {(unsigned)step, 0u, (unsigned)stream, 0u};
	philox4x32_10(c, seedLo, seedHi);
	u64 bits = ((u64)c[0] << 21) | (u64)(c[1] >> 11);
	return (double)bits * (1.0 / 9007199254740992.0);
}

// order_key maps a float to an unsigned that sorts the same way (larger
// float, larger key); key_float inverts it.
__device__ __forceinline__ unsigned order_key(float f) {
	unsigned u = (unsigned)__float_as_int(f);
	return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float key_float(unsigned k) {
	return __int_as_float((int)((k & 0x80000000u) ? (k ^ 0x80000000u) : ~k));
}

// search_cut returns the largest tau with F(tau) >= target, where F(tau)
// sums w_j over the tokens with order_key(z_j) >= max(tau, lo) and w_j is
// 1 (count) or exp(z_j*inv - mx) (mass). F falls as tau rises, so tau is
// built four bits at a time: each pass histograms the next digit of the
// keys that share tau's prefix (bin 16: keys above the prefix) and takes
// the largest digit whose suffix still reaches target. Per-thread
// histograms are added in thread order (deterministic). red holds
// 17*NT + 17*16 floats.
__device__ unsigned search_cut(const float* z, int vocab, float inv, float mx, bool mass, unsigned lo, float target, float* red) {
	int t = threadIdx.x;
	unsigned tau = 0;
	for (int shift = 28; shift >= 0; shift -= 4) {
		unsigned hiMask = shift == 28 ? 0u : (0xFFFFFFFFu << (shift + 4));
		float h[17];
		for (int i = 0; i < 17; i++) h[i] = 0;
		for (int j = t; j < vocab; j += NT) {
			unsigned k = order_key(z[j]);
			if (k < lo) continue;
			float w = mass ? expf(z[j] * inv - mx) : 1.0f;
			unsigned pre = k & hiMask;
			if (pre > tau)
				h[16] += w;
			else if (pre == tau)
				h[(k >> shift) & 15] += w;
		}
		for (int i = 0; i < 17; i++) red[i * NT + t] = h[i];
		__syncthreads();
		for (int q = t; q < 17 * 16; q += NT) {
			float s = 0;
			for (int i = 0; i < 16; i++) s += red[(q / 16) * NT + (q % 16) * 16 + i];
			red[17 * NT + q] = s;
		}
		__syncthreads();
		float H[17];
		for (int b = 0; b < 17; b++) {
			float s = 0;
			for (int i = 0; i < 16; i++) s += red[17 * NT + b * 16 + i];
			H[b] = s;
		}
		__syncthreads();
		float acc = H[16];
		for (int d = 15; d >= 0; d--) {
			acc += H[d];
			if (acc >= target) {
				tau |= (unsigned)d << shift;
				break;
			}
		}
	}
	return tau;
}

// k_sample draws one token per row of logits[rows,vocab] (one block per
// row) and writes it to ids[r] with its log-prob at the temperature over
// the whole vocabulary (before truncation) to logp[r]. invTemp 0 is greedy
// (the first largest logit; its log-prob at temperature 1). topk > 0 keeps
// the topk most likely tokens (ties by id); 0 < topp < 1 then keeps the
// smallest most-likely set whose mass reaches topp of what is left. The
// cut is found as a threshold on the logits' order keys by a bitwise
// search (32 block reductions), so the vocabulary is never sorted; the draw
// scans the kept tokens in id order with Philox uniform u.
extern "C" __global__ void k_sample(int* ids, float* logp, const float* logits, const int* stream, const int* step, int vocab,
                                    float invTemp, int topk, float topp, unsigned seedLo, unsigned seedHi) {
	__shared__ float red[17 * NT + 17 * 16];
	__shared__ int redi[NT];
	__shared__ double redd[NT];
	__shared__ double mass[NT];
	__shared__ int ties[NT], lastKept[NT];
	__shared__ int pick;
	int r = blockIdx.x, t = threadIdx.x;
	const float* z = logits + (long long)r * vocab;
	bool greedy = invTemp == 0.0f;
	float inv = greedy ? 1.0f : invTemp;
	double it = inv;

	// Argmax, ties to the lowest id: each thread's candidates rise in id.
	float best = neg_inf();
	int bi = vocab;
	for (int j = t; j < vocab; j += NT)
		if (z[j] > best) best = z[j], bi = j;
	red[t] = best, redi[t] = bi;
	__syncthreads();
	for (int s = NT / 2; s > 0; s >>= 1) {
		if (t < s && (red[t + s] > red[t] || (red[t + s] == red[t] && redi[t + s] < redi[t]))) red[t] = red[t + s], redi[t] = redi[t + s];
		__syncthreads();
	}
	best = red[0];
	int arg = redi[0];
	__syncthreads();
	float mx = (float)(best * it);
	double sum = 0;
	for (int j = t; j < vocab; j += NT) sum += exp(z[j] * it - mx);
	double lse = mx + log(block_sumd(sum, redd));
	if (greedy) {
		if (t == 0) ids[r] = arg, logp[r] = (float)(z[arg] * it - lse);
		return;
	}

	// The kept set is {key > tau} plus, when need >= 0, the first need
	// tokens (by id) with key == tau; need < 0 keeps every tie.
	unsigned tau = 0;
	int need = -1;
	float keptMass = 0;
	if (topk > 0 && topk < vocab) {
		tau = search_cut(z, vocab, inv, mx, false, 0, (float)topk, red);
		int above = 0;
		float am = 0;
		for (int j = t; j < vocab; j += NT)
			if (order_key(z[j]) > tau) above++, am += expf(z[j] * inv - mx);
		redi[t] = above;
		am = block_sum(am, red);  // also the barrier for redi
		if (t == 0) {
			int a = 0;
			for (int i = 0; i < NT; i++) a += redi[i];
			redi[0] = a;
		}
		__syncthreads();
		need = topk - redi[0];
		keptMass = am + (float)need * expf(key_float(tau) * inv - mx);
	} else {
		float m = 0;
		for (int j = t; j < vocab; j += NT) m += expf(z[j] * inv - mx);
		keptMass = block_sum(m, red);
	}
	if (topp > 0.0f && topp < 1.0f) {
		float target = topp * keptMass;
		unsigned tp = search_cut(z, vocab, inv, mx, true, tau, target, red);
		if (tp > tau) tau = tp, need = -1;
	}

	// Draw: thread t owns ids [lo,hi) in order; per-thread tie counts and
	// kept masses are prefix-summed in thread order by thread 0.
	int chunk = (vocab + NT - 1) / NT, lo = imin(t * chunk, vocab), hi = imin(lo + chunk, vocab);
	int nt = 0;
	for (int j = lo; j < hi; j++) nt += order_key(z[j]) == tau;
	ties[t] = nt;
	__syncthreads();
	if (t == 0) {
		int acc = 0;
		for (int i = 0; i < NT; i++) {
			int c = ties[i];
			ties[i] = acc;
			acc += c;
		}
	}
	__syncthreads();
	int rank = ties[t], last = -1;
	double m = 0;
	for (int j = lo; j < hi; j++) {
		unsigned k = order_key(z[j]);
		bool keep = k > tau || (k == tau && (need < 0 || rank++ < need));
		if (keep) m += exp(z[j] * it - mx), last = j;
	}
	mass[t] = m, lastKept[t] = last;
	__syncthreads();
	if (t == 0) {
		double total = 0;
		int lastAll = -1;
		for (int i = 0; i < NT; i++) total += mass[i], lastAll = lastKept[i] >= 0 ? lastKept[i] : lastAll;
		double u = uniform53(seedLo, seedHi, stream[r], step[r]) * total;
		int owner = -1;
		for (int i = 0; i < NT; i++) {
			if (mass[i] > 0 && u < mass[i]) {
				owner = i;
				break;
			}
			u -= mass[i];
		}
		redd[0] = u;
		pick = owner >= 0 ? -2 - owner : lastAll;  // thread owner scans for the residual; else u fell on the rounding edge
	}
	__syncthreads();
	if (pick == -2 - t) {
		double u = redd[0];
		int got = last;
		rank = ties[t];
		for (int j = lo; j < hi; j++) {
			unsigned k = order_key(z[j]);
			bool keep = k > tau || (k == tau && (need < 0 || rank++ < need));
			if (!keep) continue;
			u -= exp(z[j] * it - mx);
			if (u < 0) {
				got = j;
				break;
			}
		}
		pick = got;
	}
	__syncthreads();
	if (t == 0) ids[r] = pick, logp[r] = (float)(z[pick] * it - lse);
}

// ---- BF16 (mixed-precision GEMM operands) ----

// k_to_bf16 rounds FP32 to BF16 (the top 16 bits) to nearest, ties to
// even, as PyTorch's .to(torch.bfloat16) does; NaN stays a quiet NaN.
extern "C" __global__ void k_to_bf16(unsigned short* out, const float* x, int n) {
	GRID_STRIDE(i, n) {
		unsigned u = (unsigned)__float_as_int(x[i]);
		if ((u & 0x7fffffffu) > 0x7f800000u)
			out[i] = (unsigned short)((u >> 16) | 0x40u);
		else
			out[i] = (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
	}
}

// k_from_bf16 widens BF16 to FP32 (exact).
extern "C" __global__ void k_from_bf16(float* out, const unsigned short* x, int n) {
	GRID_STRIDE(i, n) out[i] = __int_as_float((int)((unsigned)x[i] << 16));
}

// ---- flash-style attention: no [B,hq,T,T] probabilities ----
//
// The forward keeps each row's log-sum-exp (lse[B,hq,T]) instead of its
// probabilities, and the backward recomputes p_ij = exp(s_ij - lse_i) from
// q and k where it needs them. One block per row; keys (or queries) are
// taken NT at a time, each thread scoring one of them into shared memory,
// and the d outputs are then summed over the chunk as in k_attn_fwd.

__device__ __forceinline__ float dotf(const float* a, const float* b, int d) {
	float s = 0;
	for (int e = 0; e < d; e++) s += a[e] * b[e];
	return s;
}

extern "C" __global__ void k_flash_fwd(float* out, float* lse, const float* q, const float* k, const float* v, const int* lens, int T,
                                       int hq, int hkv, int d, float scale) {
	__shared__ float red[NT];
	__shared__ float P[NT];
	int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z, t = threadIdx.x;
	int g = h / (hq / hkv), n = lens[b];
	float* o = out + (((long long)b * T + i) * hq + h) * d;
	float* L = lse + ((long long)b * hq + h) * T + i;
	for (int e = t; e < d; e += NT) o[e] = 0;
	if (i >= n) {
		if (t == 0) *L = 0;
		return;
	}
	const float* qi = q + (((long long)b * T + i) * hq + h) * d;
	const float* kb = k + ((long long)b * T * hkv + g) * d;
	const float* vb = v + ((long long)b * T * hkv + g) * d;
	long long rs = (long long)hkv * d;  // stride between rows of k and v
	float mx = neg_inf();
	for (int j = t; j <= i; j += NT) mx = fmaxf(mx, dotf(qi, kb + j * rs, d) * scale);
	mx = block_max(mx, red);
	float sum = 0;
	for (int j = t; j <= i; j += NT) sum += expf(dotf(qi, kb + j * rs, d) * scale - mx);
	sum = block_sum(sum, red);
	float l = mx + (float)log((double)sum);
	if (t == 0) *L = l;
	int G = row_groups(d), e0 = t % d;
	float acc = 0;
	for (int j0 = 0; j0 <= i; j0 += NT) {
		int j = j0 + t, cnt = imin(NT, i - j0 + 1);
		P[t] = j <= i ? expf(dotf(qi, kb + j * rs, d) * scale - l) : 0.0f;
		__syncthreads();
		if (G > 1) {
			for (int jj = t / d; jj < cnt; jj += G) acc += P[jj] * vb[(j0 + jj) * rs + e0];
		} else {
			for (int e = t; e < d; e += NT) {
				float a = 0;
				for (int jj = 0; jj < cnt; jj++) a += P[jj] * vb[(j0 + jj) * rs + e];
				o[e] += a;
			}
		}
		__syncthreads();
	}
	if (G > 1) {
		acc = group_sum(acc, d, red);
		if (t < d) o[e0] = acc;
	}
}

// k_flash_bwd_delta writes delta[b,h,i] = dout_i · out_i (the row term of
// the softmax backward), 0 for rows past the sequence.
extern "C" __global__ void k_flash_bwd_delta(float* delta, const float* out, const float* dout, const int* lens, int T, int hq, int d) {
	__shared__ float red[NT];
	int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
	long long row = (((long long)b * T + i) * hq + h) * d;
	float s = 0;
	if (i < lens[b])
		for (int e = threadIdx.x; e < d; e += NT) s += dout[row + e] * out[row + e];
	s = block_sum(s, red);
	if (threadIdx.x == 0) delta[((long long)b * hq + h) * T + i] = s;
}

// k_flash_bwd_dq accumulates dq_i += scale · Σ_j ds_ij k_j with
// ds_ij = p_ij (dout_i·v_j − delta_i), one block per query row.
extern "C" __global__ void k_flash_bwd_dq(float* dq, const float* dout, const float* q, const float* k, const float* v, const float* lse,
                                          const float* delta, const int* lens, int T, int hq, int hkv, int d, float scale) {
	__shared__ float red[NT];
	__shared__ float DS[NT];
	int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z, t = threadIdx.x;
	int g = h / (hq / hkv), n = lens[b];
	if (i >= n) return;
	long long row = (((long long)b * T + i) * hq + h) * d;
	const float *qi = q + row, *doi = dout + row;
	float* dqi = dq + row;
	const float* kb = k + ((long long)b * T * hkv + g) * d;
	const float* vb = v + ((long long)b * T * hkv + g) * d;
	long long rs = (long long)hkv * d;
	float l = lse[((long long)b * hq + h) * T + i], D = delta[((long long)b * hq + h) * T + i];
	int G = row_groups(d), e0 = t % d;
	float acc = 0;
	for (int j0 = 0; j0 <= i; j0 += NT) {
		int j = j0 + t, cnt = imin(NT, i - j0 + 1);
		float ds = 0;
		if (j <= i) {
			float p = expf(dotf(qi, kb + j * rs, d) * scale - l);
			ds = p * (dotf(doi, vb + j * rs, d) - D);
		}
		DS[t] = ds;
		__syncthreads();
		if (G > 1) {
			for (int jj = t / d; jj < cnt; jj += G) acc += DS[jj] * kb[(j0 + jj) * rs + e0];
		} else {
			for (int e = t; e < d; e += NT) {
				float a = 0;
				for (int jj = 0; jj < cnt; jj++) a += DS[jj] * kb[(j0 + jj) * rs + e];
				dqi[e] += scale * a;
			}
		}
		__syncthreads();
	}
	if (G > 1) {
		acc = group_sum(acc, d, red);
		if (t < d) dqi[e0] += scale * acc;
	}
}

// k_flash_bwd_dkv accumulates, for key row j of kv head g, dv_j += Σ p_ij
// dout_i and dk_j += scale · Σ ds_ij q_i over the query rows i >= j of
// every query head of the group: one block per key row, no atomics.
extern "C" __global__ void k_flash_bwd_dkv(float* dk, float* dv, const float* dout, const float* q, const float* k, const float* v,
                                           const float* lse, const float* delta, const int* lens, int T, int hq, int hkv, int d,
                                           float scale) {
	__shared__ float red[NT];
	__shared__ float PS[NT], DS[NT];
	int j = blockIdx.x, g = blockIdx.y, b = blockIdx.z, t = threadIdx.x;
	int rep = hq / hkv, n = lens[b];
	if (j >= n) return;
	long long krow = (((long long)b * T + j) * hkv + g) * d;
	const float *kj = k + krow, *vj = v + krow;
	float *dkj = dk + krow, *dvj = dv + krow;
	long long qs = (long long)hq * d;  // stride between rows of q and dout
	int G = row_groups(d), e0 = t % d;
	float acck = 0, accv = 0;
	for (int h = g * rep; h < (g + 1) * rep; h++) {
		const float* qb = q + ((long long)b * T * hq + h) * d;
		const float* db = dout + ((long long)b * T * hq + h) * d;
		const float* lh = lse + ((long long)b * hq + h) * T;
		const float* Dh = delta + ((long long)b * hq + h) * T;
		for (int i0 = j; i0 < n; i0 += NT) {
			int i = i0 + t, cnt = imin(NT, n - i0);
			float p = 0, ds = 0;
			if (i < n) {
				p = expf(dotf(qb + i * qs, kj, d) * scale - lh[i]);
				ds = p * (dotf(db + i * qs, vj, d) - Dh[i]);
			}
			PS[t] = p, DS[t] = ds;
			__syncthreads();
			if (G > 1) {
				for (int ii = t / d; ii < cnt; ii += G) {
					accv += PS[ii] * db[(i0 + ii) * qs + e0];
					acck += DS[ii] * qb[(i0 + ii) * qs + e0];
				}
			} else {
				for (int e = t; e < d; e += NT) {
					float av = 0, ak = 0;
					for (int ii = 0; ii < cnt; ii++) {
						av += PS[ii] * db[(i0 + ii) * qs + e];
						ak += DS[ii] * qb[(i0 + ii) * qs + e];
					}
					dvj[e] += av;
					dkj[e] += scale * ak;
				}
			}
			__syncthreads();
		}
	}
	if (G > 1) {
		accv = group_sum(accv, d, red);
		if (t < d) dvj[e0] += accv;
		acck = group_sum(acck, d, red);
		if (t < d) dkj[e0] += scale * acck;
	}
}
