#include "textflag.h"

// The row-invariant dot kernels (dot.go). Every output is one 8-lane
// accumulator: lane l sums a[p]·w[p] for p ≡ l (mod 8), in ascending p,
// one FMA per step; then the lanes are added by the same tree in every
// kernel (REDUCE). So an element's value depends only on its two vectors,
// never on which kernel, tile or batch computed it.

// REDUCE leaves ((l0+l4)+(l1+l5)) + ((l2+l6)+(l3+l7)) of Y in the low
// lane of X (Y's lower half), using T as scratch.
#define REDUCE(Y, X, T) \
	VEXTRACTF128 $1, Y, T; \
	VADDPS       T, X, X;  \
	VHADDPS      X, X, X;  \
	VHADDPS      X, X, X

// AXPYHEAD loads the arguments of axpy32 and axpy64 and zeroes the
// accumulators.
#define AXPYHEAD \
	MOVQ   n+0(FP), CX;   \
	MOVQ   p+8(FP), SI;   \
	MOVQ   v+16(FP), DI;  \
	MOVQ   ldv+24(FP), R9; \
	SHLQ   $2, R9;        \
	MOVQ   o+32(FP), DX;  \
	VXORPS Y0, Y0, Y0;    \
	VXORPS Y1, Y1, Y1;    \
	VXORPS Y2, Y2, Y2;    \
	VXORPS Y3, Y3, Y3;    \
	VXORPS Y4, Y4, Y4;    \
	VXORPS Y5, Y5, Y5;    \
	VXORPS Y6, Y6, Y6;    \
	VXORPS Y7, Y7, Y7

// Each dot kernel takes a state st and flags fl: with fl&1 its
// accumulators start from the 8-lane sums stored in st (a previous call
// over the same vectors' earlier elements) instead of zero; with fl&2 it
// finishes, writing each REDUCE to t, and otherwise stores the 8-lane sums
// back to st. Splitting k this way changes no lane's sequence of FMAs.

// ZERO12, LOAD12 and STORE12 move the twelve accumulators Y0–Y11 from
// nothing, from the state at AX, or to it; REDUCE12 finishes them to DX.
#define ZERO12 \
	VXORPS Y0, Y0, Y0;   \
	VXORPS Y1, Y1, Y1;   \
	VXORPS Y2, Y2, Y2;   \
	VXORPS Y3, Y3, Y3;   \
	VXORPS Y4, Y4, Y4;   \
	VXORPS Y5, Y5, Y5;   \
	VXORPS Y6, Y6, Y6;   \
	VXORPS Y7, Y7, Y7;   \
	VXORPS Y8, Y8, Y8;   \
	VXORPS Y9, Y9, Y9;   \
	VXORPS Y10, Y10, Y10; \
	VXORPS Y11, Y11, Y11

#define LOAD12 \
	VMOVUPS 0(AX), Y0;   \
	VMOVUPS 32(AX), Y1;  \
	VMOVUPS 64(AX), Y2;  \
	VMOVUPS 96(AX), Y3;  \
	VMOVUPS 128(AX), Y4; \
	VMOVUPS 160(AX), Y5; \
	VMOVUPS 192(AX), Y6; \
	VMOVUPS 224(AX), Y7; \
	VMOVUPS 256(AX), Y8; \
	VMOVUPS 288(AX), Y9; \
	VMOVUPS 320(AX), Y10; \
	VMOVUPS 352(AX), Y11

#define STORE12 \
	VMOVUPS Y0, 0(AX);   \
	VMOVUPS Y1, 32(AX);  \
	VMOVUPS Y2, 64(AX);  \
	VMOVUPS Y3, 96(AX);  \
	VMOVUPS Y4, 128(AX); \
	VMOVUPS Y5, 160(AX); \
	VMOVUPS Y6, 192(AX); \
	VMOVUPS Y7, 224(AX); \
	VMOVUPS Y8, 256(AX); \
	VMOVUPS Y9, 288(AX); \
	VMOVUPS Y10, 320(AX); \
	VMOVUPS Y11, 352(AX)

#define REDUCE12 \
	REDUCE(Y0, X0, X12);   \
	VMOVSS X0, 0(DX);      \
	REDUCE(Y1, X1, X12);   \
	VMOVSS X1, 4(DX);      \
	REDUCE(Y2, X2, X12);   \
	VMOVSS X2, 8(DX);      \
	REDUCE(Y3, X3, X12);   \
	VMOVSS X3, 12(DX);     \
	REDUCE(Y4, X4, X12);   \
	VMOVSS X4, 16(DX);     \
	REDUCE(Y5, X5, X12);   \
	VMOVSS X5, 20(DX);     \
	REDUCE(Y6, X6, X12);   \
	VMOVSS X6, 24(DX);     \
	REDUCE(Y7, X7, X12);   \
	VMOVSS X7, 28(DX);     \
	REDUCE(Y8, X8, X12);   \
	VMOVSS X8, 32(DX);     \
	REDUCE(Y9, X9, X12);   \
	VMOVSS X9, 36(DX);     \
	REDUCE(Y10, X10, X12); \
	VMOVSS X10, 40(DX);    \
	REDUCE(Y11, X11, X12); \
	VMOVSS X11, 44(DX)

// func dot4x3(k8 int, a *float32, lda int, w *float32, ldw int, st, t *float32, fl int, pf uintptr)
// a_i·w_j over 8·k8 elements for rows a_0..a_3 (stride lda elements) and
// w_0..w_2 (stride ldw), in accumulator Y(3i+j), finishing to t[3i+j].
// The three w blocks of a step sit in Y12–Y14, a row's block in Y15.
// Unless pf is 0, each step also prefetches the same 32 bytes of three
// rows from pf on (stride ldw): the next tile's weights, which would
// otherwise come from memory after this tile's FMAs are done.
TEXT ·dot4x3(SB), NOSPLIT, $0-72
	MOVQ k8+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ lda+16(FP), R8
	SHLQ $2, R8
	MOVQ w+24(FP), DI
	MOVQ ldw+32(FP), R9
	SHLQ $2, R9
	MOVQ st+40(FP), AX
	MOVQ t+48(FP), DX
	MOVQ fl+56(FP), BX
	MOVQ pf+64(FP), R12
	LEAQ (SI)(R8*2), R11
	ADDQ R8, R11         // a_3
	ZERO12
	TESTQ $1, BX
	JE    d43go
	LOAD12

d43go:
	TESTQ CX, CX
	JE    d43done
	TESTQ R12, R12
	JE    d43loop

d43pf:
	PREFETCHT0  (R12)
	PREFETCHT0  (R12)(R9*1)
	PREFETCHT0  (R12)(R9*2)
	VMOVUPS     (DI), Y12
	VMOVUPS     (DI)(R9*1), Y13
	VMOVUPS     (DI)(R9*2), Y14
	VMOVUPS     (SI), Y15
	VFMADD231PS Y12, Y15, Y0
	VFMADD231PS Y13, Y15, Y1
	VFMADD231PS Y14, Y15, Y2
	VMOVUPS     (SI)(R8*1), Y15
	VFMADD231PS Y12, Y15, Y3
	VFMADD231PS Y13, Y15, Y4
	VFMADD231PS Y14, Y15, Y5
	VMOVUPS     (SI)(R8*2), Y15
	VFMADD231PS Y12, Y15, Y6
	VFMADD231PS Y13, Y15, Y7
	VFMADD231PS Y14, Y15, Y8
	VMOVUPS     (R11), Y15
	VFMADD231PS Y12, Y15, Y9
	VFMADD231PS Y13, Y15, Y10
	VFMADD231PS Y14, Y15, Y11
	ADDQ        $32, SI
	ADDQ        $32, DI
	ADDQ        $32, R11
	ADDQ        $32, R12
	DECQ        CX
	JNE         d43pf
	JMP         d43done

d43loop:
	VMOVUPS     (DI), Y12
	VMOVUPS     (DI)(R9*1), Y13
	VMOVUPS     (DI)(R9*2), Y14
	VMOVUPS     (SI), Y15
	VFMADD231PS Y12, Y15, Y0
	VFMADD231PS Y13, Y15, Y1
	VFMADD231PS Y14, Y15, Y2
	VMOVUPS     (SI)(R8*1), Y15
	VFMADD231PS Y12, Y15, Y3
	VFMADD231PS Y13, Y15, Y4
	VFMADD231PS Y14, Y15, Y5
	VMOVUPS     (SI)(R8*2), Y15
	VFMADD231PS Y12, Y15, Y6
	VFMADD231PS Y13, Y15, Y7
	VFMADD231PS Y14, Y15, Y8
	VMOVUPS     (R11), Y15
	VFMADD231PS Y12, Y15, Y9
	VFMADD231PS Y13, Y15, Y10
	VFMADD231PS Y14, Y15, Y11
	ADDQ        $32, SI
	ADDQ        $32, DI
	ADDQ        $32, R11
	DECQ        CX
	JNE         d43loop

d43done:
	TESTQ $2, BX
	JNE   d43reduce
	STORE12
	VZEROUPPER
	RET

d43reduce:
	REDUCE12
	VZEROUPPER
	RET

// func dot1x12(k8 int, a *float32, w *float32, ldw int, st, t *float32, fl int)
// a·w_j over 8·k8 elements for w_0..w_11 (stride ldw) in accumulator Yj,
// finishing to t[j]. a's block sits in Y12; each w block is an FMA's
// memory operand, read through four row pointers (DI: rows 0,1,2; BX:
// 3,4,5; R10: 6,7,8; R11: 9,10,11).
TEXT ·dot1x12(SB), NOSPLIT, $0-56
	MOVQ k8+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ w+16(FP), DI
	MOVQ ldw+24(FP), R9
	SHLQ $2, R9
	MOVQ st+32(FP), AX
	MOVQ t+40(FP), DX
	MOVQ fl+48(FP), R8
	LEAQ (DI)(R9*2), BX
	ADDQ R9, BX
	LEAQ (BX)(R9*2), R10
	ADDQ R9, R10
	LEAQ (R10)(R9*2), R11
	ADDQ R9, R11
	ZERO12
	TESTQ $1, R8
	JE    d112go
	LOAD12

d112go:
	TESTQ CX, CX
	JE    d112done

d112loop:
	VMOVUPS     (SI), Y12
	VFMADD231PS (DI), Y12, Y0
	VFMADD231PS (DI)(R9*1), Y12, Y1
	VFMADD231PS (DI)(R9*2), Y12, Y2
	VFMADD231PS (BX), Y12, Y3
	VFMADD231PS (BX)(R9*1), Y12, Y4
	VFMADD231PS (BX)(R9*2), Y12, Y5
	VFMADD231PS (R10), Y12, Y6
	VFMADD231PS (R10)(R9*1), Y12, Y7
	VFMADD231PS (R10)(R9*2), Y12, Y8
	VFMADD231PS (R11), Y12, Y9
	VFMADD231PS (R11)(R9*1), Y12, Y10
	VFMADD231PS (R11)(R9*2), Y12, Y11
	ADDQ        $32, SI
	ADDQ        $32, DI
	ADDQ        $32, BX
	ADDQ        $32, R10
	ADDQ        $32, R11
	DECQ        CX
	JNE         d112loop

d112done:
	TESTQ $2, R8
	JNE   d112reduce
	STORE12
	VZEROUPPER
	RET

d112reduce:
	REDUCE12
	VZEROUPPER
	RET

// func dot1x1(k8 int, a, w *float32, st, t *float32, fl int)
// a·w over 8·k8 elements in one accumulator, finishing to t[0]: for the
// edges the tiled kernels leave.
TEXT ·dot1x1(SB), NOSPLIT, $0-48
	MOVQ   k8+0(FP), CX
	MOVQ   a+8(FP), SI
	MOVQ   w+16(FP), DI
	MOVQ   st+24(FP), AX
	MOVQ   t+32(FP), DX
	MOVQ   fl+40(FP), R8
	VXORPS Y0, Y0, Y0
	TESTQ  $1, R8
	JE     d11go
	VMOVUPS (AX), Y0

d11go:
	TESTQ CX, CX
	JE    d11done

d11loop:
	VMOVUPS     (SI), Y1
	VFMADD231PS (DI), Y1, Y0
	ADDQ        $32, SI
	ADDQ        $32, DI
	DECQ        CX
	JNE         d11loop

d11done:
	TESTQ $2, R8
	JNE   d11reduce
	VMOVUPS Y0, (AX)
	VZEROUPPER
	RET

d11reduce:
	REDUCE(Y0, X0, X1)
	VMOVSS X0, (DX)
	VZEROUPPER
	RET

// func axpy64(n int, p *float32, v *float32, ldv int, o *float32)
// o[e] = Σ_j p[j]·v_j[e] for e < 64, rows v_j with stride ldv elements:
// one FMA per (j, e) in ascending j, from zero, in eight accumulators.
TEXT ·axpy64(SB), NOSPLIT, $0-40
	AXPYHEAD
	TESTQ CX, CX
	JE    ax64store

ax64loop:
	VBROADCASTSS (SI), Y8
	VFMADD231PS  (DI), Y8, Y0
	VFMADD231PS  32(DI), Y8, Y1
	VFMADD231PS  64(DI), Y8, Y2
	VFMADD231PS  96(DI), Y8, Y3
	VFMADD231PS  128(DI), Y8, Y4
	VFMADD231PS  160(DI), Y8, Y5
	VFMADD231PS  192(DI), Y8, Y6
	VFMADD231PS  224(DI), Y8, Y7
	ADDQ         $4, SI
	ADDQ         R9, DI
	DECQ         CX
	JNE          ax64loop

ax64store:
	VMOVUPS Y0, (DX)
	VMOVUPS Y1, 32(DX)
	VMOVUPS Y2, 64(DX)
	VMOVUPS Y3, 96(DX)
	VMOVUPS Y4, 128(DX)
	VMOVUPS Y5, 160(DX)
	VMOVUPS Y6, 192(DX)
	VMOVUPS Y7, 224(DX)
	VZEROUPPER
	RET

// func axpy32(n int, p *float32, v *float32, ldv int, o *float32)
// axpy64 for e < 32, in four accumulators.
TEXT ·axpy32(SB), NOSPLIT, $0-40
	AXPYHEAD
	TESTQ CX, CX
	JE    ax32store

ax32loop:
	VBROADCASTSS (SI), Y8
	VFMADD231PS  (DI), Y8, Y0
	VFMADD231PS  32(DI), Y8, Y1
	VFMADD231PS  64(DI), Y8, Y2
	VFMADD231PS  96(DI), Y8, Y3
	ADDQ         $4, SI
	ADDQ         R9, DI
	DECQ         CX
	JNE          ax32loop

ax32store:
	VMOVUPS Y0, (DX)
	VMOVUPS Y1, 32(DX)
	VMOVUPS Y2, 64(DX)
	VMOVUPS Y3, 96(DX)
	VZEROUPPER
	RET

// func maxf32(x *float32, blocks int) float32
// The largest of the first 32·blocks elements (blocks ≥ 1), in four
// 8-wide running maxima.
TEXT ·maxf32(SB), NOSPLIT, $0-20
	MOVQ    x+0(FP), SI
	MOVQ    blocks+8(FP), CX
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	ADDQ    $128, SI
	DECQ    CX
	JE      mxdone

mxloop:
	VMAXPS (SI), Y0, Y0
	VMAXPS 32(SI), Y1, Y1
	VMAXPS 64(SI), Y2, Y2
	VMAXPS 96(SI), Y3, Y3
	ADDQ   $128, SI
	DECQ   CX
	JNE    mxloop

mxdone:
	VMAXPS       Y1, Y0, Y0
	VMAXPS       Y3, Y2, Y2
	VMAXPS       Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS       X1, X0, X0
	VPERMILPS    $0x4e, X0, X1
	VMAXPS       X1, X0, X0
	VPERMILPS    $0xb1, X0, X1
	VMAXPS       X1, X0, X0
	VMOVSS       X0, ret+16(FP)
	VZEROUPPER
	RET
