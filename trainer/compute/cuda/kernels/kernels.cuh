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
