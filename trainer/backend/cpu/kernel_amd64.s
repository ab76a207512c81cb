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
