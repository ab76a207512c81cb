//go:build cudaemu || (cuda && !cudastub)

package cuda_test

import (
	"strings"
	"testing"

	"github.com/rlhost/rlhost/trainer/compute/cuda"
)

// A bad index must not reach a kernel: the op sets the sticky error,
// later ops and downloads are skipped, and Sync keeps returning it.
func TestStickyError(t *testing.T) {
	cases := []struct {
		name, want string
		bad        func(be *cuda.Device)
	}{
		{"cache write past the cache", "cache write at 7+2 past 8", func(be *cuda.Device) {
			c, x := be.Alloc(2*8*4), be.Alloc(2*2*4)
			be.WriteCache(c, x, intsT(be, 0, 7), 2, 2, 8, 4)
		}},
		{"embedding id outside the table", "id 5 outside [0,5)", func(be *cuda.Device) {
			tb, out := be.Alloc(5*3), be.Alloc(2*3)
			be.Embed(out, tb, intsT(be, 1, 5), 2, 3)
		}},
		{"target outside the vocabulary", "targets 10, vocabulary is 10", func(be *cuda.Device) {
			z, lp, ls := be.Alloc(10), be.Alloc(1), be.Alloc(1)
			be.LogProbs(lp, ls, z, intsT(be, 10), 1, 10, 1)
		}},
		{"sequence longer than T", "length 4, outside [0,3]", func(be *cuda.Device) {
			q, att := be.Alloc(3*1*2), be.Alloc(3*3)
			be.Attention(be.Alloc(3*1*2), att, q, q, q, intsT(be, 4), 1, 3, 1, 1, 2)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			be := newCUDA(t)
			v := be.Alloc(4)
			be.Fill(v, 1)
			if err := be.Sync(); err != nil {
				t.Fatal(err)
			}
			c.bad(be)
			err := be.Err()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Err() = %v, want it to contain %q", err, c.want)
			}
			be.Fill(v, 2) // skipped
			got := []float32{9, 9, 9, 9}
			be.Download(got, v) // skipped: got unchanged
			if got[0] != 9 {
				t.Fatalf("download ran after the error: %v", got)
			}
			if err2 := be.Sync(); err2 != err {
				t.Fatalf("Sync() = %v, want the sticky %v", err2, err)
			}
		})
	}
}
