#include "textflag.h"

// Eight copies of one float32 bit pattern: a ymm memory operand.
#define CONST8(name, bits) \
	DATA name<>+0(SB)/4, $bits; \
	DATA name<>+4(SB)/4, $bits; \
	DATA name<>+8(SB)/4, $bits; \
	DATA name<>+12(SB)/4, $bits; \
	DATA name<>+16(SB)/4, $bits; \
	DATA name<>+20(SB)/4, $bits; \
	DATA name<>+24(SB)/4, $bits; \
	DATA name<>+28(SB)/4, $bits; \
	GLOBL name<>(SB), RODATA|NOPTR, $32

CONST8(expHi, 0x42b0999a)  // 88.3: 2^127·1.42 stays finite
CONST8(expLo, 0xc2ac0000)  // -86: 2^-124 stays a normal number
CONST8(log2e, 0x3fb8aa3b)  // log2(e)
CONST8(ln2hi, 0x3f318000)  // ln 2, high 9 bits: n·ln2hi is exact
CONST8(ln2lo, 0xb95e8083)  // ln 2 − ln2hi
CONST8(expC6, 0x3ab60b61)  // 1/720
CONST8(expC5, 0x3c088889)  // 1/120
CONST8(expC4, 0x3d2aaaab)  // 1/24
CONST8(expC3, 0x3e2aaaab)  // 1/6
CONST8(expC2, 0x3f000000)  // 1/2
CONST8(expOne, 0x3f800000) // 1

// func expAffine(dst, src *float32, blocks int, a, b, c float32) float64
// For the first 8·blocks elements: e = exp(a·src[i] − b); dst[i] = c·e
// unless dst is nil; returns Σe summed in float64.
// exp: n = round(x·log2 e), r = x − n·ln 2 (two steps, |r| ≤ ln2/2), then
// the degree-6 Taylor polynomial of e^r (error ≤ r⁷/7! ≈ 1.2e-7) scaled
// by 2^n through the exponent bits. Arguments are clamped to [-86, 88.3];
// a NaN argument stays NaN (the clamps return their second operand).
TEXT ·expAffine(SB), NOSPLIT, $0-48
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         blocks+16(FP), CX
	VBROADCASTSS a+24(FP), Y15
	VBROADCASTSS b+28(FP), Y14
	VBROADCASTSS c+32(FP), Y13
	VXORPD       Y11, Y11, Y11
	VXORPD       Y12, Y12, Y12
	TESTQ        CX, CX
	JE           edone

eloop:
	VMOVUPS      (SI), Y0
	VFMSUB213PS  Y14, Y15, Y0      // x = a·src − b
	VMOVUPS      expHi<>(SB), Y1
	VMINPS       Y0, Y1, Y0
	VMOVUPS      expLo<>(SB), Y1
	VMAXPS       Y0, Y1, Y0
	VMULPS       log2e<>(SB), Y0, Y2
	VROUNDPS     $0, Y2, Y2        // n, to nearest
	VFNMADD231PS ln2hi<>(SB), Y2, Y0
	VFNMADD231PS ln2lo<>(SB), Y2, Y0 // r
	VMOVUPS      expC6<>(SB), Y1
	VFMADD213PS  expC5<>(SB), Y0, Y1
	VFMADD213PS  expC4<>(SB), Y0, Y1
	VFMADD213PS  expC3<>(SB), Y0, Y1
	VFMADD213PS  expC2<>(SB), Y0, Y1
	VFMADD213PS  expOne<>(SB), Y0, Y1
	VFMADD213PS  expOne<>(SB), Y0, Y1 // e^r
	VCVTPS2DQ    Y2, Y2
	VPSLLD       $23, Y2, Y2
	VPADDD       Y2, Y1, Y1        // e^r · 2^n
	VCVTPS2PD    X1, Y3
	VADDPD       Y3, Y11, Y11
	VEXTRACTF128 $1, Y1, X4
	VCVTPS2PD    X4, Y4
	VADDPD       Y4, Y12, Y12
	TESTQ        DI, DI
	JE           enext
	VMULPS       Y13, Y1, Y1
	VMOVUPS      Y1, (DI)
	ADDQ         $32, DI

enext:
	ADDQ $32, SI
	DECQ CX
	JNE  eloop

edone:
	VADDPD       Y12, Y11, Y11
	VEXTRACTF128 $1, Y11, X0
	VADDPD       X0, X11, X0
	VHADDPD      X0, X0, X0
	VMOVSD       X0, ret+40(FP)
	VZEROUPPER
	RET
