// Package compute defines the compute interface the trainer's model runs on:
// every numerical op a Qwen2/Llama forward, backward and AdamW step needs,
// over opaque tensor handles that may live in device memory.
//
// It deliberately holds no implementation and no model knowledge. Model
// code never indexes a tensor's memory: data crosses the host/device line
// only through Upload and Download, so a CUDA backend can sit behind the
// same interface. Implementations live in sub-packages (compute/cpu,
// compute/cuda).
package compute

// Tensor is an opaque handle to a flat array of floats owned by a backend.
// Shapes are not stored: every op takes its dimensions explicitly, as in
// llm.c, so the call site reads like the formula it implements.
type Tensor interface {
	// Len is the number of elements.
	Len() int
}

// Ints is an opaque handle to a flat array of int32 owned by a backend
// (token ids, positions, target ids, sequence lengths).
type Ints interface {
	Len() int
}

// Device is a compute device (the CPU or a GPU): every op the model needs. Conventions, for all ops:
//   - Matrices are row-major. A "row" of an activation is one token.
//   - Forward ops overwrite their outputs.
//   - Backward ops ACCUMULATE (+=) into gradient outputs (dx, dw, ...), as
//     in llm.c, so residual branches and tied weights need no extra adds.
//     Exceptions are documented on the op.
//   - A backend is used by one goroutine at a time; ops may run in
//     parallel internally.
type Device interface {
	// Name identifies the backend and its element type ("cpu-f32").
	Name() string
	// Close releases worker goroutines and device memory.
	Close()

	// Sync waits until every queued op has finished and returns the
	// backend's sticky error (see Err). A device backend queues ops
	// asynchronously, so an op's failure surfaces here, not at the call.
	Sync() error
	// Err returns the first error any op has hit since the backend was
	// opened, without waiting. It is sticky: once set, later ops are
	// skipped and every Sync returns it. The CPU backend panics on misuse
	// instead and always returns nil.
	Err() error

	// Alloc returns a zeroed tensor of n elements.
	Alloc(n int) Tensor
	// View returns the n elements of t starting at off, sharing memory.
	View(t Tensor, off, n int) Tensor
	// AllocInts returns a zeroed int array of n elements.
	AllocInts(n int) Ints
	// ViewInts returns the n elements of t starting at off, sharing memory.
	ViewInts(t Ints, off, n int) Ints

	Upload(dst Tensor, src []float32)
	Download(dst []float32, src Tensor)
	UploadInts(dst Ints, src []int32)

	// Zero sets t to 0. Copy copies src to dst (same length).
	Zero(t Tensor)
	Copy(dst, src Tensor)
	// Fill sets every element of t to v.
	Fill(t Tensor, v float32)
	// Add sets out = a + b elementwise; out may alias a or b.
	Add(out, a, b Tensor)
	// Accumulate sets dst += src.
	Accumulate(dst, src Tensor)
	// Scale sets t *= s.
	Scale(t Tensor, s float32)
	// SumSquares returns sum(t^2), accumulated in float64 (gradient norms).
	SumSquares(t Tensor) float64

	// MatMul computes c[m,n] = op(a)·op(b) (+ c when accumulate), where
	// op(a) is [m,k] (a stored [k,m] when transA) and op(b) is [k,n]
	// (b stored [n,k] when transB). A linear layer y = x·Wᵀ with HF weight
	// W [out,in] is MatMul(y, x, W, rows, out, in, false, true, false).
	MatMul(c, a, b Tensor, m, n, k int, transA, transB, accumulate bool)

	// AddBias adds bias[cols] to every row of x[rows,cols].
	AddBias(x, bias Tensor, rows, cols int)
	// BiasBackward accumulates the column sums of dy[rows,cols] into dbias.
	BiasBackward(dbias, dy Tensor, rows, cols int)

	// RMSNorm: out = w * (x * rstd), rstd = 1/sqrt(mean(x^2)+eps) per row;
	// rstd[rows] is kept for the backward.
	RMSNorm(out, rstd, x, w Tensor, rows, dim int, eps float32)
	RMSNormBackward(dx, dw, dout, x, w, rstd Tensor, rows, dim int)

	// RoPE rotates x[rows,heads,headDim] in place with the split-halves
	// (rotate_half) layout: angle pos[row]*theta^(-2i/headDim).
	RoPE(x Tensor, pos Ints, rows, heads, headDim int, theta float64)
	// RoPEBackward applies the inverse rotation to dx in place (it
	// overwrites rather than accumulates: the rotation is its own op).
	RoPEBackward(dx Tensor, pos Ints, rows, heads, headDim int, theta float64)

	// Attention is causal grouped-query attention over B sequences padded
	// to T. q is [B*T,hq,d], k and v are [B*T,hkv,d], out is [B*T,hq,d].
	// Row t of sequence b sees keys 0..t that are < lens[b]; rows at or
	// past lens[b] produce zeros. att[B,hq,T,T] keeps the probabilities.
	Attention(out, att, q, k, v Tensor, lens Ints, B, T, hq, hkv, d int)
	AttentionBackward(dq, dk, dv, dout, q, k, v, att Tensor, lens Ints, B, T, hq, hkv, d int)
	// AttentionCached is the generation form: q is [B*tq,hq,d] for tq new
	// rows per sequence; kc and vc are caches [B,maxT,hkv,d] already holding
	// the keys for the new rows. Row i of sequence b sits at position
	// start[b]+i and sees cache positions 0..start[b]+i.
	AttentionCached(out, q, kc, vc Tensor, start Ints, B, tq, maxT, hq, hkv, d int)
	// WriteCache copies x[B*tq,width] into cache[B,maxT,width] at rows
	// start[b]..start[b]+tq-1 of each sequence.
	WriteCache(cache, x Tensor, start Ints, B, tq, maxT, width int)

	// SwiGLU: out = silu(gate) * up, elementwise over n.
	SwiGLU(out, gate, up Tensor, n int)
	SwiGLUBackward(dgate, dup, dout, gate, up Tensor, n int)

	// Embed gathers out[r] = table[ids[r]] for rows r, each dim wide.
	Embed(out, table Tensor, ids Ints, rows, dim int)
	// EmbedBackward scatter-adds dtable[ids[r]] += dout[r].
	EmbedBackward(dtable, dout Tensor, ids Ints, rows, dim int)

	// LogProbs computes, for each row r with targets[r] >= 0,
	// logp[r] = log softmax(logits[r]*invTemp)[targets[r]] and keeps the
	// row's log-sum-exp in lse[r]; rows with a negative target get 0.
	LogProbs(logp, lse, logits Tensor, targets Ints, rows, vocab int, invTemp float32)
	// LogProbsBackward OVERWRITES dlogits with d(sum dlogp·logp)/dlogits;
	// dlogits may alias logits (the logits are consumed row by row).
	LogProbsBackward(dlogits, dlogp, logits, lse Tensor, targets Ints, rows, vocab int, invTemp float32)

	// AdamW applies one PyTorch-semantics AdamW step (decoupled weight
	// decay, bias correction for 1-based step) to param using grad and the
	// moment buffers m and v.
	AdamW(param, grad, m, v Tensor, h AdamWParams)
}

// AdamWParams are the hyper-parameters of one AdamW step.
type AdamWParams struct {
	LR, Beta1, Beta2, Eps, WeightDecay float32
	Step                               int // 1 for the first update
}

// Float64IO is implemented by backends that can move float64 data without
// rounding through float32; gradient checks use it with a float64 backend.
type Float64IO interface {
	Upload64(dst Tensor, src []float64)
	Download64(dst []float64, src Tensor)
}

// LSEAttention is implemented by devices that can run attention without
// keeping the [B,hq,T,T] probabilities: the forward keeps each row's
// log-sum-exp and the backward recomputes the probabilities from q and k
// (flash-attention style), so activation memory grows with T, not T².
// The model uses it when LSEAttention reports true.
type LSEAttention interface {
	LSEAttention() bool
	// AttentionLSE is Attention with lse[B,hq,T] (the log-sum-exp of each
	// row's scaled scores; 0 for rows past the sequence) in place of att.
	AttentionLSE(out, lse, q, k, v Tensor, lens Ints, B, T, hq, hkv, d int)
	// AttentionLSEBackward is AttentionBackward from the forward's output
	// out and lse instead of att.
	AttentionLSEBackward(dq, dk, dv, dout, out, q, k, v, lse Tensor, lens Ints, B, T, hq, hkv, d int)
}

// RowLinear is implemented by devices with a linear layer whose rows do
// not depend on the batch: row i of the output is the same, bit for bit,
// whatever m is and whatever the other rows hold. Generation uses it, so
// that a sequence's tokens do not depend on which other requests share
// its forward pass, and a prefix computed in one pass can be reused in
// another (trainer/model's Cache).
type RowLinear interface {
	// LinearRows computes y[m,n] (+ y when accumulate) = x[m,k]·wᵀ for w
	// stored [n,k]: MatMul(y, x, w, m, n, k, false, true, accumulate)
	// with batch-invariant rows.
	LinearRows(y, x, w Tensor, m, n, k int, accumulate bool)
}
