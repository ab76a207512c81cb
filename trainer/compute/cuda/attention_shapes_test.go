//go:build cudaemu || (cuda && !cudastub)

package cuda_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/rlhost/rlhost/trainer/compute"
)

// Attention forward and backward over seeded random shapes: batch sizes,
// group sizes, head dims, and lengths from 0 (an empty sequence) to T,
// including T not a multiple of the kernels' 16-row tiles.
func TestAttentionRandomShapesMatchCPU(t *testing.T) {
	shapes := rand.New(rand.NewPCG(42, 0))
	for c := range 8 {
		B, T := 1+shapes.IntN(3), 1+shapes.IntN(40)
		hkv, grp := 1+shapes.IntN(2), 1+shapes.IntN(3)
		d := []int{2, 4, 6, 8, 16, 20}[shapes.IntN(6)]
		lens := make([]int32, B)
		for i := range lens {
			lens[i] = int32(shapes.IntN(T + 1))
		}
		lens[0] = int32(T) // at least one full sequence, so the output is not all zeros
		if B > 1 && c%2 == 0 {
			lens[B-1] = 0
		}
		name := fmt.Sprintf("B=%d T=%d hq=%d hkv=%d d=%d lens=%v", B, T, hkv*grp, hkv, d, lens)
		t.Run(name, func(t *testing.T) {
			run := func(be compute.Device) []output {
				return attentionShape(be, rand.New(rand.NewPCG(uint64(c), 7)), B, T, hkv*grp, hkv, d, lens)
			}
			ref, gpu := newCPU(t), newCUDA(t)
			ro, got := run(ref), run(gpu)
			if err := gpu.Sync(); err != nil {
				t.Fatal(err)
			}
			for j := range ro {
				compare(t, ro[j].name, download(ref, ro[j].t), download(gpu, got[j].t), opTol)
			}
		})
	}
}

func attentionShape(be compute.Device, r *rand.Rand, B, T, hq, hkv, d int, lens []int32) []output {
	N := B * T
	q, k, v := randT(be, r, N*hq*d, 1), randT(be, r, N*hkv*d, 1), randT(be, r, N*hkv*d, 1)
	out, att := randT(be, r, N*hq*d, 1), randT(be, r, B*hq*T*T, 1)
	l := intsT(be, lens...)
	be.Attention(out, att, q, k, v, l, B, T, hq, hkv, d)
	dout := randT(be, r, N*hq*d, 1)
	dq, dk, dv := randT(be, r, N*hq*d, 1), randT(be, r, N*hkv*d, 1), randT(be, r, N*hkv*d, 1)
	be.AttentionBackward(dq, dk, dv, dout, q, k, v, att, l, B, T, hq, hkv, d)
	return []output{{"out", out}, {"att", att}, {"dq", dq}, {"dk", dk}, {"dv", dv}}
}
