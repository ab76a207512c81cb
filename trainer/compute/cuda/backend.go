// Package cuda is the GPU implementation of compute.Device: FP32 tensors
// in device memory, kernels from package kernels compiled with NVRTC,
// GEMMs on cuBLAS, everything queued on one stream. Errors are sticky
// (compute.Device.Err) and surface at Sync and at every Download.
//
// The op logic (grid sizes, argument marshalling, the row-major GEMM
// mapping) is plain Go over the Driver interface, so the cudaemu test
// build runs it against an emulator on the CPU. The real device needs the
// cuda build tag; without it Open says so. Matmuls run in FP32 or, with
// SetPrecision("bf16"), on BF16 operands with FP32 accumulation. It does
// no autograd or shape tracking.
package cuda

import (
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/rlhost/rlhost/trainer/compute"
	"github.com/rlhost/rlhost/trainer/compute/cuda/kernels"
)

const nt = kernels.BlockThreads

// tensor is a float32 array in device memory; views share the base.
type tensor struct {
	ptr uint64
	n   int
}

func (t *tensor) Len() int { return t.n }

// ints is an int32 array in device memory with a host mirror of what was
// uploaded, so ops can validate indices (cache positions, token ids)
// without a device round trip.
type ints struct {
	ptr  uint64
	host []int32
}

func (t *ints) Len() int { return len(t.host) }

// Device implements compute.Device on a Driver.
type Device struct {
	dev    Driver
	err    error
	allocs map[uint64]int // base address -> bytes
	bytes  int64          // device bytes allocated now
	peak   int64

	// Scratch, grown on first use and then reused.
	ds, sc    *tensor // attention dS, cached-attention scores
	prod, one *tensor // RMSNorm backward products; a vector of ones
	part      *tensor // k_sumsq partials (float64 pairs)
	partHost  []float64
	invFreq   *tensor
	freqKey   [2]float64

	// bf16 runs MatMul on BF16 copies of its operands (SetPrecision);
	// bfa and bfb are those copies, grown like the other scratch.
	bf16     bool
	bfa, bfb *BF16

	flash bool    // LSEAttention (SetFlashAttention)
	delta *tensor // flash backward's row terms
}

var _ compute.Device = (*Device)(nil)

// New returns a backend on dev; Close closes dev.
func New(dev Driver) *Device { return &Device{dev: dev, allocs: map[uint64]int{}} }

// Name implements compute.Device.
func (b *Device) Name() string {
	if b.bf16 {
		return "cuda-bf16"
	}
	return "cuda-f32"
}

// Precisions are SetPrecision's settings.
var Precisions = []string{"fp32", "bf16"}

// SetPrecision selects how MatMul computes. "fp32" (the default) is
// cublasSgemm in full FP32. "bf16" is mixed precision as PyTorch's
// autocast runs a linear layer: both operands are rounded to BF16 and
// multiplied with FP32 accumulation into an FP32 result (cublasGemmEx,
// CUBLAS_COMPUTE_32F); parameters (the master weights), gradients,
// AdamW's moments and every non-GEMM op stay FP32. The column sums of
// BiasBackward and RMSNormBackward stay FP32 in either mode.
func (b *Device) SetPrecision(p string) error {
	switch p {
	case "fp32", "":
		b.bf16 = false
	case "bf16":
		b.bf16 = true
	default:
		return fmt.Errorf("cuda: precision %q is not one of fp32, bf16", p)
	}
	return nil
}

// DeviceName describes the device.
func (b *Device) DeviceName() string { return b.dev.Name() }

// PeakBytes is the most device memory the backend has held at once.
func (b *Device) PeakBytes() int64 { return b.peak }

// HeldBytes is the device memory the backend holds now.
func (b *Device) HeldBytes() int64 { return b.bytes }

// Close implements compute.Device. It waits for queued work first, so
// no kernel is still using memory when it is freed.
func (b *Device) Close() {
	_ = b.dev.Sync()
	for p := range b.allocs {
		_ = b.dev.Free(p)
	}
	clear(b.allocs)
	_ = b.dev.Close()
}

// Sync implements compute.Device.
func (b *Device) Sync() error {
	if b.err == nil {
		if err := b.dev.Sync(); err != nil {
			b.fail(fmt.Errorf("cuda: sync: %w", err))
		}
	}
	return b.err
}

// Err implements compute.Device.
func (b *Device) Err() error { return b.err }

func (b *Device) fail(err error) {
	if b.err == nil {
		b.err = err
	}
}

// ok reports whether ops should still run.
func (b *Device) ok() bool { return b.err == nil }

func (b *Device) alloc(bytes int) uint64 {
	if !b.ok() {
		return 0
	}
	p, err := b.dev.Alloc(bytes)
	if err != nil {
		b.fail(fmt.Errorf("cuda: alloc %d bytes (%d held): %w", bytes, b.bytes, err))
		return 0
	}
	b.allocs[p] = bytes
	b.bytes += int64(bytes)
	b.peak = max(b.peak, b.bytes)
	return p
}

func dt(t compute.Tensor) *tensor { return t.(*tensor) }
func di(t compute.Ints) *ints     { return t.(*ints) }

// Alloc implements compute.Device.
func (b *Device) Alloc(n int) compute.Tensor { return &tensor{ptr: b.alloc(4 * n), n: n} }

// View implements compute.Device.
func (b *Device) View(t compute.Tensor, off, n int) compute.Tensor {
	x := dt(t)
	if off < 0 || n < 0 || off+n > x.n {
		panic(fmt.Sprintf("cuda: view [%d:%d] of tensor of %d", off, off+n, x.n))
	}
	return &tensor{ptr: x.ptr + uint64(4*off), n: n}
}

// AllocInts implements compute.Device.
func (b *Device) AllocInts(n int) compute.Ints {
	return &ints{ptr: b.alloc(4 * n), host: make([]int32, n)}
}

// ViewInts implements compute.Device.
func (b *Device) ViewInts(t compute.Ints, off, n int) compute.Ints {
	x := di(t)
	return &ints{ptr: x.ptr + uint64(4*off), host: x.host[off : off+n : off+n]}
}

// Upload implements compute.Device.
func (b *Device) Upload(dst compute.Tensor, src []float32) {
	x := dt(dst)
	if len(src) != x.n {
		panic(fmt.Sprintf("cuda: upload of %d floats into tensor of %d", len(src), x.n))
	}
	if b.ok() && x.n > 0 {
		if err := b.dev.HtoD(x.ptr, unsafe.Pointer(&src[0]), 4*x.n); err != nil {
			b.fail(fmt.Errorf("cuda: upload: %w", err))
		}
	}
}

// Download implements compute.Device. It waits for queued ops; on a
// sticky error dst is left unchanged (check Err or Sync).
func (b *Device) Download(dst []float32, src compute.Tensor) {
	x := dt(src)
	if len(dst) != x.n {
		panic(fmt.Sprintf("cuda: download of tensor of %d into %d floats", x.n, len(dst)))
	}
	if b.ok() && x.n > 0 {
		if err := b.dev.DtoH(unsafe.Pointer(&dst[0]), x.ptr, 4*x.n); err != nil {
			b.fail(fmt.Errorf("cuda: download: %w", err))
		}
	}
}

// UploadInts implements compute.Device.
func (b *Device) UploadInts(dst compute.Ints, src []int32) {
	x := di(dst)
	if len(src) != len(x.host) {
		panic(fmt.Sprintf("cuda: upload of %d ints into array of %d", len(src), len(x.host)))
	}
	copy(x.host, src)
	if b.ok() && len(src) > 0 {
		if err := b.dev.HtoD(x.ptr, unsafe.Pointer(&src[0]), 4*len(src)); err != nil {
			b.fail(fmt.Errorf("cuda: upload ints: %w", err))
		}
	}
}

// Argument packing: one uint64 per kernel parameter.
func p(t compute.Tensor) uint64 { return dt(t).ptr }
func pi(t compute.Ints) uint64  { return di(t).ptr }
func i32(v int) uint64          { return uint64(uint32(int32(v))) }
func f32(v float32) uint64      { return uint64(math.Float32bits(v)) }

// launch queues kernel over a 3-D grid of nt-thread blocks.
func (b *Device) launch(kernel string, grid [3]int, args ...uint64) {
	if !b.ok() {
		return
	}
	if grid[0] <= 0 || grid[1] <= 0 || grid[2] <= 0 {
		return // nothing to do
	}
	if err := b.dev.Launch(kernel, grid, [3]int{nt, 1, 1}, args); err != nil {
		b.fail(fmt.Errorf("cuda: %s: %w", kernel, err))
	}
}

// blocks1 is a 1-D grid covering n elements at nt per block, capped: the
// elementwise kernels stride over the rest.
func blocks1(n int) [3]int { return [3]int{min((n+nt-1)/nt, 1<<16), 1, 1} }

// Zero implements compute.Device.
func (b *Device) Zero(t compute.Tensor) { b.Fill(t, 0) }

// Fill implements compute.Device.
func (b *Device) Fill(t compute.Tensor, v float32) {
	n := t.Len()
	b.launch("k_fill", blocks1(n), p(t), f32(v), i32(n))
}

// Copy implements compute.Device.
func (b *Device) Copy(dst, src compute.Tensor) {
	n := dst.Len()
	if src.Len() != n {
		panic(fmt.Sprintf("cuda: copy of %d into %d", src.Len(), n))
	}
	b.launch("k_copy", blocks1(n), p(dst), p(src), i32(n))
}

// Add implements compute.Device.
func (b *Device) Add(out, a, c compute.Tensor) {
	n := out.Len()
	b.launch("k_add", blocks1(n), p(out), p(a), p(c), i32(n))
}

// Accumulate implements compute.Device.
func (b *Device) Accumulate(dst, src compute.Tensor) {
	n := dst.Len()
	b.launch("k_accumulate", blocks1(n), p(dst), p(src), i32(n))
}

// Scale implements compute.Device.
func (b *Device) Scale(t compute.Tensor, s float32) {
	n := t.Len()
	b.launch("k_scale", blocks1(n), p(t), f32(s), i32(n))
}

const sumsqBlocks = 256

// SumSquares implements compute.Device: per-block float64 partials on the
// device, added on the host in block order (deterministic). It syncs; on
// error it returns NaN and the error sticks.
func (b *Device) SumSquares(t compute.Tensor) float64 {
	n := t.Len()
	if b.part == nil {
		b.part = dt(b.Alloc(2 * sumsqBlocks))
		b.partHost = make([]float64, sumsqBlocks)
	}
	g := min((n+nt-1)/nt, sumsqBlocks)
	if g == 0 {
		return 0
	}
	b.launch("k_sumsq", [3]int{g, 1, 1}, p(t), i32(n), b.part.ptr)
	if b.ok() {
		if err := b.dev.DtoH(unsafe.Pointer(&b.partHost[0]), b.part.ptr, 8*g); err != nil {
			b.fail(fmt.Errorf("cuda: sumsq download: %w", err))
		}
	}
	if !b.ok() {
		return math.NaN()
	}
	var s float64
	for _, v := range b.partHost[:g] {
		s += v
	}
	return s
}

// MatMul implements compute.Device on cuBLAS. Row-major C = op(A)·op(B)
// is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ, and a row-major matrix is its
// transpose in column-major, so cuBLAS gets B first, A second, with m and
// n swapped and the same transpose flags.
func (b *Device) MatMul(c, a, bb compute.Tensor, m, n, k int, transA, transB, acc bool) {
	if b.bf16 {
		if c.Len() < m*n || a.Len() < m*k || bb.Len() < k*n {
			panic(fmt.Sprintf("cuda: matmul %dx%dx%d on tensors of %d, %d, %d", m, n, k, c.Len(), a.Len(), bb.Len()))
		}
		ha, hb := b.scratchBF16(&b.bfa, m*k), b.scratchBF16(&b.bfb, k*n)
		if b.ok() && m > 0 && n > 0 && k > 0 {
			b.launch("k_to_bf16", blocks1(m*k), ha.ptr, p(a), i32(m*k))
			b.launch("k_to_bf16", blocks1(k*n), hb.ptr, p(bb), i32(k*n))
		}
		b.MatMulBF16(c, ha, hb, m, n, k, transA, transB, acc)
		return
	}
	b.sgemm(c, a, bb, m, n, k, transA, transB, acc)
}

// rowMajorGemm gives the leading dimensions and beta with which a
// column-major GEMM computes the row-major C = op(A)·op(B): it is called as
// Cᵀ = op(B)ᵀ·op(A)ᵀ, operands swapped (see docs/cuda.md).
func rowMajorGemm(m, n, k int, transA, transB, acc bool) (lda, ldb int, beta float32) {
	lda, ldb = k, n
	if transA {
		lda = m
	}
	if transB {
		ldb = k
	}
	if acc {
		beta = 1
	}
	return lda, ldb, beta
}

// sgemm is MatMul in FP32 whatever the precision.
func (b *Device) sgemm(c, a, bb compute.Tensor, m, n, k int, transA, transB, acc bool) {
	if c.Len() < m*n || a.Len() < m*k || bb.Len() < k*n {
		panic(fmt.Sprintf("cuda: matmul %dx%dx%d on tensors of %d, %d, %d", m, n, k, c.Len(), a.Len(), bb.Len()))
	}
	if !b.ok() || m == 0 || n == 0 {
		return
	}
	lda, ldb, beta := rowMajorGemm(m, n, k, transA, transB, acc)
	if err := b.dev.Sgemm(transB, transA, n, m, k, 1, p(bb), ldb, p(a), lda, beta, p(c), n); err != nil {
		b.fail(fmt.Errorf("cuda: sgemm %dx%dx%d: %w", m, n, k, err))
	}
}

// AddBias implements compute.Device.
func (b *Device) AddBias(x, bias compute.Tensor, rows, cols int) {
	b.launch("k_add_bias", blocks1(rows*cols), p(x), p(bias), i32(rows), i32(cols))
}

// BiasBackward implements compute.Device as a GEMV on cuBLAS:
// dbias[1,cols] += ones[1,rows]·dy[rows,cols]. A column sum has too little
// parallelism for a kernel with one thread per column, and atomics would
// make the sum order (and so the result) vary from run to run.
func (b *Device) BiasBackward(dbias, dy compute.Tensor, rows, cols int) {
	b.sgemm(dbias, b.ones(rows), dy, 1, cols, rows, false, false, true)
}

// ones returns a device vector of n ones (grown on first use).
func (b *Device) ones(n int) compute.Tensor {
	if b.one == nil || b.one.n < n {
		b.scratch(&b.one, n)
		b.Fill(b.one, 1)
	}
	return b.View(b.one, 0, n)
}

// RMSNorm implements compute.Device.
func (b *Device) RMSNorm(out, rstd, x, w compute.Tensor, rows, dim int, eps float32) {
	b.launch("k_rmsnorm", [3]int{rows, 1, 1}, p(out), p(rstd), p(x), p(w), i32(dim), f32(eps))
}

// RMSNormBackward implements compute.Device.
func (b *Device) RMSNormBackward(dx, dw, dout, x, w, rstd compute.Tensor, rows, dim int) {
	b.launch("k_rmsnorm_bwd_dx", [3]int{rows, 1, 1}, p(dx), p(dout), p(x), p(w), p(rstd), i32(dim))
	// dw[1,dim] += rstd[1,rows]·(dout⊙x)[rows,dim], a GEMV (see BiasBackward).
	prod := b.View(b.scratch(&b.prod, rows*dim), 0, rows*dim)
	b.launch("k_mul", blocks1(rows*dim), p(prod), p(dout), p(x), i32(rows*dim))
	b.sgemm(dw, rstd, prod, 1, dim, rows, false, false, true)
}

// ropeFreqs uploads 1/theta^(2i/headDim) computed exactly as the CPU
// backend does (float32 steps), once per (headDim, theta).
func (b *Device) ropeFreqs(headDim int, theta float64) uint64 {
	key := [2]float64{float64(headDim), theta}
	if b.invFreq != nil && b.freqKey == key {
		return b.invFreq.ptr
	}
	half := headDim / 2
	f := make([]float32, half)
	for i := range half {
		e := float32(2*i) / float32(headDim)
		f[i] = float32(1 / float32(math.Pow(theta, float64(e))))
	}
	b.scratch(&b.invFreq, half)
	b.Upload(b.View(b.invFreq, 0, half), f)
	b.freqKey = key
	return b.invFreq.ptr
}

func (b *Device) rope(x compute.Tensor, pos compute.Ints, rows, heads, headDim int, theta float64, sign float32) {
	f := b.ropeFreqs(headDim, theta)
	b.launch("k_rope", blocks1(rows*headDim/2), p(x), pi(pos), f, i32(rows), i32(heads), i32(headDim), f32(sign))
}

// RoPE implements compute.Device.
func (b *Device) RoPE(x compute.Tensor, pos compute.Ints, rows, heads, headDim int, theta float64) {
	b.rope(x, pos, rows, heads, headDim, theta, 1)
}

// RoPEBackward implements compute.Device.
func (b *Device) RoPEBackward(dx compute.Tensor, pos compute.Ints, rows, heads, headDim int, theta float64) {
	b.rope(dx, pos, rows, heads, headDim, theta, -1)
}

// scratch returns *s grown to at least n floats; a smaller old buffer is
// freed once queued work is done with it.
func (b *Device) scratch(s **tensor, n int) *tensor {
	if *s == nil || (*s).n < n {
		if *s != nil {
			b.release(*s)
		}
		*s = dt(b.Alloc(n))
	}
	return *s
}

// scratchBF16 is scratch for BF16 arrays: *s grown to at least n
// elements, returned as a view of exactly n.
func (b *Device) scratchBF16(s **BF16, n int) *BF16 {
	if *s == nil || (*s).n < n {
		if *s != nil {
			b.releasePtr((*s).ptr)
		}
		*s = b.AllocBF16(n)
	}
	return &BF16{ptr: (*s).ptr, n: n}
}

// release frees t, which must be a whole allocation, after a Sync.
func (b *Device) release(t *tensor) { b.releasePtr(t.ptr) }

func (b *Device) releasePtr(ptr uint64) {
	size, ok := b.allocs[ptr]
	if !ok || b.Sync() != nil {
		return
	}
	if err := b.dev.Free(ptr); err != nil {
		b.fail(fmt.Errorf("cuda: free: %w", err))
		return
	}
	delete(b.allocs, ptr)
	b.bytes -= int64(size)
}

// ATT_QT (= ATT_KT) and ATT_DMAX of the tiled attention kernels.
const attTileRows, attTileMaxD = 16, 128

func attnScale(d int) float32 { return float32(1 / math.Sqrt(float64(d))) }

// Attention implements compute.Device: one block per tile of 16 query
// rows for head dims up to 128, else one block per query row.
func (b *Device) Attention(out, att, q, k, v compute.Tensor, lens compute.Ints, B, T, hq, hkv, d int) {
	b.checkLens(lens, B, T)
	if d <= attTileMaxD {
		b.launch("k_attn_fwd_tiled", [3]int{(T + attTileRows - 1) / attTileRows, hq, B}, p(out), p(att), p(q), p(k), p(v), pi(lens),
			i32(T), i32(hq), i32(hkv), i32(d), f32(attnScale(d)))
		return
	}
	b.launch("k_attn_fwd", [3]int{T, hq, B}, p(out), p(att), p(q), p(k), p(v), pi(lens),
		i32(T), i32(hq), i32(hkv), i32(d), f32(attnScale(d)))
}

// AttentionBackward implements compute.Device: dS into scratch, then dQ
// by query rows and dK/dV by key rows (no atomics); tiled like Attention
// for head dims up to 128.
func (b *Device) AttentionBackward(dq, dk, dv, dout, q, k, v, att compute.Tensor, lens compute.Ints, B, T, hq, hkv, d int) {
	b.checkLens(lens, B, T)
	ds := b.scratch(&b.ds, B*hq*T*T)
	if d <= attTileMaxD {
		qt := (T + attTileRows - 1) / attTileRows
		b.launch("k_attn_bwd_ds_tiled", [3]int{qt, hq, B}, ds.ptr, p(dout), p(v), p(att), pi(lens),
			i32(T), i32(hq), i32(hkv), i32(d), f32(attnScale(d)))
		b.launch("k_attn_bwd_dq_tiled", [3]int{qt, hq, B}, p(dq), ds.ptr, p(k), pi(lens), i32(T), i32(hq), i32(hkv), i32(d))
		b.launch("k_attn_bwd_dkv_tiled", [3]int{qt, hkv, B}, p(dk), p(dv), ds.ptr, p(att), p(q), p(dout), pi(lens),
			i32(T), i32(hq), i32(hkv), i32(d))
		return
	}
	b.launch("k_attn_bwd_ds", [3]int{T, hq, B}, ds.ptr, p(dout), p(v), p(att), pi(lens),
		i32(T), i32(hq), i32(hkv), i32(d), f32(attnScale(d)))
	b.launch("k_attn_bwd_dq", [3]int{T, hq, B}, p(dq), ds.ptr, p(k), pi(lens), i32(T), i32(hq), i32(hkv), i32(d))
	b.launch("k_attn_bwd_dkv", [3]int{T, hkv, B}, p(dk), p(dv), ds.ptr, p(att), p(q), p(dout), pi(lens),
		i32(T), i32(hq), i32(hkv), i32(d))
}

func (b *Device) checkLens(lens compute.Ints, B, T int) {
	for i, n := range di(lens).host[:B] {
		if n < 0 || int(n) > T {
			b.fail(fmt.Errorf("cuda: attention: sequence %d has length %d, outside [0,%d]", i, n, T))
		}
	}
}

func (b *Device) checkStart(op string, start compute.Ints, B, tq, maxT int) {
	for i, s := range di(start).host[:B] {
		if s < 0 || int(s)+tq > maxT {
			b.fail(fmt.Errorf("cuda: %s at %d+%d past %d (sequence %d)", op, s, tq, maxT, i))
		}
	}
}

// AttentionCached implements compute.Device.
func (b *Device) AttentionCached(out, q, kc, vc compute.Tensor, start compute.Ints, B, tq, maxT, hq, hkv, d int) {
	b.checkStart("cached attention", start, B, tq, maxT)
	sc := b.scratch(&b.sc, B*hq*tq*maxT)
	b.launch("k_attn_cached", [3]int{tq, hq, B}, p(out), sc.ptr, p(q), p(kc), p(vc), pi(start),
		i32(tq), i32(maxT), i32(hq), i32(hkv), i32(d), f32(attnScale(d)))
}

// WriteCache implements compute.Device.
func (b *Device) WriteCache(cache, x compute.Tensor, start compute.Ints, B, tq, maxT, width int) {
	b.checkStart("cache write", start, B, tq, maxT)
	b.launch("k_write_cache", blocks1(B*tq*width), p(cache), p(x), pi(start), i32(B), i32(tq), i32(maxT), i32(width))
}

// SwiGLU implements compute.Device.
func (b *Device) SwiGLU(out, gate, up compute.Tensor, n int) {
	b.launch("k_swiglu", blocks1(n), p(out), p(gate), p(up), i32(n))
}

// SwiGLUBackward implements compute.Device.
func (b *Device) SwiGLUBackward(dgate, dup, dout, gate, up compute.Tensor, n int) {
	b.launch("k_swiglu_bwd", blocks1(n), p(dgate), p(dup), p(dout), p(gate), p(up), i32(n))
}

func (b *Device) checkIDs(op string, ids compute.Ints, rows, tableRows int) {
	for r, id := range di(ids).host[:rows] {
		if id < 0 || int(id) >= tableRows {
			b.fail(fmt.Errorf("cuda: %s: row %d has id %d outside [0,%d)", op, r, id, tableRows))
			return
		}
	}
}

// Embed implements compute.Device.
func (b *Device) Embed(out, table compute.Tensor, ids compute.Ints, rows, dim int) {
	b.checkIDs("embed", ids, rows, table.Len()/dim)
	b.launch("k_embed", blocks1(rows*dim), p(out), p(table), pi(ids), i32(rows), i32(dim))
}

// EmbedBackward implements compute.Device.
func (b *Device) EmbedBackward(dtable, dout compute.Tensor, ids compute.Ints, rows, dim int) {
	b.checkIDs("embed backward", ids, rows, dtable.Len()/dim)
	b.launch("k_embed_bwd", blocks1(dim), p(dtable), p(dout), pi(ids), i32(rows), i32(dim))
}

// LogProbs implements compute.Device: one block per row.
func (b *Device) LogProbs(logp, lse, logits compute.Tensor, targets compute.Ints, rows, vocab int, invTemp float32) {
	b.checkTargets(targets, rows, vocab)
	b.launch("k_logprobs", [3]int{rows, 1, 1}, p(logp), p(lse), p(logits), pi(targets), i32(vocab), f32(invTemp))
}

// LogProbsBackward implements compute.Device.
func (b *Device) LogProbsBackward(dlogits, dlogp, logits, lse compute.Tensor, targets compute.Ints, rows, vocab int, invTemp float32) {
	b.checkTargets(targets, rows, vocab)
	b.launch("k_logprobs_bwd", [3]int{rows, 1, 1}, p(dlogits), p(dlogp), p(logits), p(lse), pi(targets), i32(vocab), f32(invTemp))
}

func (b *Device) checkTargets(targets compute.Ints, rows, vocab int) {
	for r, t := range di(targets).host[:rows] {
		if int(t) >= vocab {
			b.fail(fmt.Errorf("cuda: log-probs: row %d targets %d, vocabulary is %d", r, t, vocab))
			return
		}
	}
}

// AdamW implements compute.Device; the scalars are computed as the CPU
// backend computes them.
func (b *Device) AdamW(param, grad, m, v compute.Tensor, h compute.AdamWParams) {
	bc1 := 1 - math.Pow(float64(h.Beta1), float64(h.Step))
	bc2 := 1 - math.Pow(float64(h.Beta2), float64(h.Step))
	step := float32(float64(h.LR) / bc1)
	sq := float32(math.Sqrt(bc2))
	decay := float32(1 - float64(h.LR)*float64(h.WeightDecay))
	n := param.Len()
	b.launch("k_adamw", blocks1(n), p(param), p(grad), p(m), p(v), i32(n),
		f32(step), f32(sq), f32(decay), f32(h.Beta1), f32(h.Beta2), f32(h.Eps))
}

// ErrNotBuilt is returned by Open in a build without the cuda tag.
var ErrNotBuilt = errors.New("this rlhost was built without CUDA support (build it with `make build-cuda`)")

var _ compute.TokenSampler = (*Device)(nil)

// SampleTokens implements compute.TokenSampler: one block per row (see
// k_sample in kernels.cuh).
func (b *Device) SampleTokens(ids compute.Ints, logp, logits compute.Tensor, stream, step compute.Ints, rows, vocab int, s compute.Sampling) {
	if ids.Len() < rows || logp.Len() < rows || logits.Len() < rows*vocab || stream.Len() < rows || step.Len() < rows {
		panic(fmt.Sprintf("cuda: sample %d rows of %d from arrays of %d ids, %d log-probs, %d logits, %d streams, %d steps",
			rows, vocab, ids.Len(), logp.Len(), logits.Len(), stream.Len(), step.Len()))
	}
	if s.Temperature < 0 || s.TopK < 0 || s.TopP < 0 || s.TopP > 1 {
		b.fail(fmt.Errorf("cuda: sample: invalid temperature %g, top-k %d or top-p %g", s.Temperature, s.TopK, s.TopP))
		return
	}
	var inv float32
	if s.Temperature > 0 {
		inv = 1 / s.Temperature
	}
	b.launch("k_sample", [3]int{rows, 1, 1}, pi(ids), p(logp), p(logits), pi(stream), pi(step), i32(vocab),
		f32(inv), i32(s.TopK), f32(s.TopP), uint64(uint32(s.Seed)), uint64(uint32(s.Seed>>32)))
}

// DownloadInts implements compute.TokenSampler. The host mirror that
// index checks read is updated too.
func (b *Device) DownloadInts(dst []int32, src compute.Ints) {
	x := di(src)
	if len(dst) != len(x.host) {
		panic(fmt.Sprintf("cuda: download of %d ints into %d", len(x.host), len(dst)))
	}
	if b.ok() && len(dst) > 0 {
		if err := b.dev.DtoH(unsafe.Pointer(&dst[0]), x.ptr, 4*len(dst)); err != nil {
			b.fail(fmt.Errorf("cuda: download ints: %w", err))
			return
		}
		copy(x.host, dst)
	}
}

// BF16 is a bfloat16 array in device memory: the GEMM operand type of
// mixed precision (FP32 master weights, BF16 copies for the matmuls).
type BF16 struct {
	ptr uint64
	n   int
}

// Len is the number of elements.
func (t *BF16) Len() int { return t.n }

// AllocBF16 returns a zeroed BF16 array of n elements.
func (b *Device) AllocBF16(n int) *BF16 { return &BF16{ptr: b.alloc(4 * ((n + 1) / 2)), n: n} }

// ToBF16 rounds src to BF16 into dst (nearest, ties to even).
func (b *Device) ToBF16(dst *BF16, src compute.Tensor) {
	if dst.n != src.Len() {
		panic(fmt.Sprintf("cuda: bf16 cast of %d into %d", src.Len(), dst.n))
	}
	b.launch("k_to_bf16", blocks1(dst.n), dst.ptr, p(src), i32(dst.n))
}

// FromBF16 widens src into dst (exact).
func (b *Device) FromBF16(dst compute.Tensor, src *BF16) {
	if dst.Len() != src.n {
		panic(fmt.Sprintf("cuda: bf16 widen of %d into %d", src.n, dst.Len()))
	}
	b.launch("k_from_bf16", blocks1(src.n), p(dst), src.ptr, i32(src.n))
}

// MatMulBF16 is MatMul with BF16 operands, an FP32 result and FP32
// accumulation (cublasGemmEx, CUBLAS_COMPUTE_32F), the matmul of BF16
// mixed precision; the row-major mapping is MatMul's.
func (b *Device) MatMulBF16(c compute.Tensor, a, bb *BF16, m, n, k int, transA, transB, acc bool) {
	if c.Len() < m*n || a.n < m*k || bb.n < k*n {
		panic(fmt.Sprintf("cuda: bf16 matmul %dx%dx%d on tensors of %d, %d, %d", m, n, k, c.Len(), a.n, bb.n))
	}
	if !b.ok() || m == 0 || n == 0 {
		return
	}
	lda, ldb, beta := rowMajorGemm(m, n, k, transA, transB, acc)
	if err := b.dev.GemmBF16(transB, transA, n, m, k, 1, bb.ptr, ldb, a.ptr, lda, beta, p(c), n); err != nil {
		b.fail(fmt.Errorf("cuda: bf16 gemm %dx%dx%d: %w", m, n, k, err))
	}
}

var _ compute.LSEAttention = (*Device)(nil)

// SetFlashAttention makes LSEAttention report on: the model then keeps
// row log-sum-exps instead of attention probabilities (k_flash_*). It is
// off by default: the kernels recompute the probabilities one row per
// block and are not tuned, so they trade speed for O(T) memory.
func (b *Device) SetFlashAttention(on bool) { b.flash = on }

// LSEAttention implements compute.LSEAttention.
func (b *Device) LSEAttention() bool { return b.flash }

// AttentionLSE implements compute.LSEAttention.
func (b *Device) AttentionLSE(out, lse, q, k, v compute.Tensor, lens compute.Ints, B, T, hq, hkv, d int) {
	b.checkLens(lens, B, T)
	if lse.Len() < B*hq*T {
		panic(fmt.Sprintf("cuda: attention lse of %d for %dx%dx%d", lse.Len(), B, hq, T))
	}
	b.launch("k_flash_fwd", [3]int{T, hq, B}, p(out), p(lse), p(q), p(k), p(v), pi(lens),
		i32(T), i32(hq), i32(hkv), i32(d), f32(attnScale(d)))
}

// AttentionLSEBackward implements compute.LSEAttention: the row terms
// dout·out into scratch, then dQ by query rows and dK/dV by key rows.
func (b *Device) AttentionLSEBackward(dq, dk, dv, dout, out, q, k, v, lse compute.Tensor, lens compute.Ints, B, T, hq, hkv, d int) {
	b.checkLens(lens, B, T)
	delta := b.scratch(&b.delta, B*hq*T)
	b.launch("k_flash_bwd_delta", [3]int{T, hq, B}, delta.ptr, p(out), p(dout), pi(lens), i32(T), i32(hq), i32(d))
	b.launch("k_flash_bwd_dq", [3]int{T, hq, B}, p(dq), p(dout), p(q), p(k), p(v), p(lse), delta.ptr, pi(lens),
		i32(T), i32(hq), i32(hkv), i32(d), f32(attnScale(d)))
	b.launch("k_flash_bwd_dkv", [3]int{T, hkv, B}, p(dk), p(dv), p(dout), p(q), p(k), p(v), p(lse), delta.ptr, pi(lens),
		i32(T), i32(hq), i32(hkv), i32(d), f32(attnScale(d)))
}
