#include "textflag.h"

// func kern6x16(kk int, a, b, t *float32)
// t[6×16] = Σ_p a[p*6+i] · b[p*16+j] over kk steps of packed panels.
// Twelve ymm accumulators (Y4–Y15) hold the tile: row i in Y(4+2i) for
// columns 0–7 and Y(5+2i) for columns 8–15. Each step loads 16 values of
// B into Y0/Y1 and broadcasts the 6 values of A through Y2/Y3.
TEXT ·kern6x16(SB), NOSPLIT, $0-32
	MOVQ kk+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DI
	MOVQ t+24(FP), DX
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	VXORPS Y12, Y12, Y12
	VXORPS Y13, Y13, Y13
	VXORPS Y14, Y14, Y14
	VXORPS Y15, Y15, Y15
	TESTQ CX, CX
	JE    done

loop:
	VMOVUPS      0(DI), Y0
	VMOVUPS      32(DI), Y1
	VBROADCASTSS 0(SI), Y2
	VFMADD231PS  Y0, Y2, Y4
	VFMADD231PS  Y1, Y2, Y5
	VBROADCASTSS 4(SI), Y3
	VFMADD231PS  Y0, Y3, Y6
	VFMADD231PS  Y1, Y3, Y7
	VBROADCASTSS 8(SI), Y2
	VFMADD231PS  Y0, Y2, Y8
	VFMADD231PS  Y1, Y2, Y9
	VBROADCASTSS 12(SI), Y3
	VFMADD231PS  Y0, Y3, Y10
	VFMADD231PS  Y1, Y3, Y11
	VBROADCASTSS 16(SI), Y2
	VFMADD231PS  Y0, Y2, Y12
	VFMADD231PS  Y1, Y2, Y13
	VBROADCASTSS 20(SI), Y3
	VFMADD231PS  Y0, Y3, Y14
	VFMADD231PS  Y1, Y3, Y15
	ADDQ         $24, SI
	ADDQ         $64, DI
	DECQ         CX
	JNE          loop

done:
	VMOVUPS Y4, 0(DX)
	VMOVUPS Y5, 32(DX)
	VMOVUPS Y6, 64(DX)
	VMOVUPS Y7, 96(DX)
	VMOVUPS Y8, 128(DX)
	VMOVUPS Y9, 160(DX)
	VMOVUPS Y10, 192(DX)
	VMOVUPS Y11, 224(DX)
	VMOVUPS Y12, 256(DX)
	VMOVUPS Y13, 288(DX)
	VMOVUPS Y14, 320(DX)
	VMOVUPS Y15, 352(DX)
	VZEROUPPER
	RET

// func kern6x16acc(kk int, a, b, c *float32, ldc int)
// Like kern6x16, but adds the full 6×16 tile straight into C (row stride
// ldc elements), saving the round trip through a scratch tile.
TEXT ·kern6x16acc(SB), NOSPLIT, $0-40
	MOVQ kk+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DI
	MOVQ c+24(FP), DX
	MOVQ ldc+32(FP), R8
	SHLQ $2, R8
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	VXORPS Y12, Y12, Y12
	VXORPS Y13, Y13, Y13
	VXORPS Y14, Y14, Y14
	VXORPS Y15, Y15, Y15
	TESTQ CX, CX
	JE    adone

aloop:
	VMOVUPS      0(DI), Y0
	VMOVUPS      32(DI), Y1
	VBROADCASTSS 0(SI), Y2
	VFMADD231PS  Y0, Y2, Y4
	VFMADD231PS  Y1, Y2, Y5
	VBROADCASTSS 4(SI), Y3
	VFMADD231PS  Y0, Y3, Y6
	VFMADD231PS  Y1, Y3, Y7
	VBROADCASTSS 8(SI), Y2
	VFMADD231PS  Y0, Y2, Y8
	VFMADD231PS  Y1, Y2, Y9
	VBROADCASTSS 12(SI), Y3
	VFMADD231PS  Y0, Y3, Y10
	VFMADD231PS  Y1, Y3, Y11
	VBROADCASTSS 16(SI), Y2
	VFMADD231PS  Y0, Y2, Y12
	VFMADD231PS  Y1, Y2, Y13
	VBROADCASTSS 20(SI), Y3
	VFMADD231PS  Y0, Y3, Y14
	VFMADD231PS  Y1, Y3, Y15
	ADDQ         $24, SI
	ADDQ         $64, DI
	DECQ         CX
	JNE          aloop

adone:
	VADDPS  0(DX), Y4, Y4
	VMOVUPS Y4, 0(DX)
	VADDPS  32(DX), Y5, Y5
	VMOVUPS Y5, 32(DX)
	ADDQ    R8, DX
	VADDPS  0(DX), Y6, Y6
	VMOVUPS Y6, 0(DX)
	VADDPS  32(DX), Y7, Y7
	VMOVUPS Y7, 32(DX)
	ADDQ    R8, DX
	VADDPS  0(DX), Y8, Y8
	VMOVUPS Y8, 0(DX)
	VADDPS  32(DX), Y9, Y9
	VMOVUPS Y9, 32(DX)
	ADDQ    R8, DX
	VADDPS  0(DX), Y10, Y10
	VMOVUPS Y10, 0(DX)
	VADDPS  32(DX), Y11, Y11
	VMOVUPS Y11, 32(DX)
	ADDQ    R8, DX
	VADDPS  0(DX), Y12, Y12
	VMOVUPS Y12, 0(DX)
	VADDPS  32(DX), Y13, Y13
	VMOVUPS Y13, 32(DX)
	ADDQ    R8, DX
	VADDPS  0(DX), Y14, Y14
	VMOVUPS Y14, 0(DX)
	VADDPS  32(DX), Y15, Y15
	VMOVUPS Y15, 32(DX)
	VZEROUPPER
	RET

// func fmaPeak(iters int) float32
// Twelve independent chains of 8-wide fused multiply-adds, no memory
// traffic: the vector FMA peak of one core (16 flops per instruction).
TEXT ·fmaPeak(SB), NOSPLIT, $0-12
	MOVQ         iters+0(FP), CX
	MOVL         $0x3f7fbe77, AX // 0.999
	MOVQ         AX, X0
	VBROADCASTSS X0, Y0
	MOVL         $0x3a83126f, AX // 0.001
	MOVQ         AX, X1
	VBROADCASTSS X1, Y1
	VXORPS       Y4, Y4, Y4
	VXORPS       Y5, Y5, Y5
	VXORPS       Y6, Y6, Y6
	VXORPS       Y7, Y7, Y7
	VXORPS       Y8, Y8, Y8
	VXORPS       Y9, Y9, Y9
	VXORPS       Y10, Y10, Y10
	VXORPS       Y11, Y11, Y11
	VXORPS       Y12, Y12, Y12
	VXORPS       Y13, Y13, Y13
	VXORPS       Y14, Y14, Y14
	VXORPS       Y15, Y15, Y15
	TESTQ        CX, CX
	JE           pdone

ploop:
	VFMADD213PS Y1, Y0, Y4
	VFMADD213PS Y1, Y0, Y5
	VFMADD213PS Y1, Y0, Y6
	VFMADD213PS Y1, Y0, Y7
	VFMADD213PS Y1, Y0, Y8
	VFMADD213PS Y1, Y0, Y9
	VFMADD213PS Y1, Y0, Y10
	VFMADD213PS Y1, Y0, Y11
	VFMADD213PS Y1, Y0, Y12
	VFMADD213PS Y1, Y0, Y13
	VFMADD213PS Y1, Y0, Y14
	VFMADD213PS Y1, Y0, Y15
	DECQ        CX
	JNE         ploop

pdone:
	VADDPS  Y5, Y4, Y4
	VADDPS  Y15, Y4, Y4
	VMOVSS  X4, ret+8(FP)
	VZEROUPPER
	RET

// func dot32(a, b *float32, blocks int) float32
// Σ a[i]·b[i] over blocks·32 elements with four 8-wide FMA chains; the
// caller adds the tail. Used for matrix-vector products (decoding).
TEXT ·dot32(SB), NOSPLIT, $0-28
	MOVQ   a+0(FP), SI
	MOVQ   b+8(FP), DI
	MOVQ   blocks+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	TESTQ  CX, CX
	JE     ddone

dloop:
	VMOVUPS     0(SI), Y4
	VFMADD231PS 0(DI), Y4, Y0
	VMOVUPS     32(SI), Y5
	VFMADD231PS 32(DI), Y5, Y1
	VMOVUPS     64(SI), Y6
	VFMADD231PS 64(DI), Y6, Y2
	VMOVUPS     96(SI), Y7
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ        $128, SI
	ADDQ        $128, DI
	DECQ        CX
	JNE         dloop

ddone:
	VADDPS       Y1, Y0, Y0
	VADDPS       Y3, Y2, Y2
	VADDPS       Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	VMOVSS       X0, ret+24(FP)
	VZEROUPPER
	RET
