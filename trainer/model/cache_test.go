package model

import (
	"math"
	"testing"

	"github.com/rlhost/rlhost/trainer/compute/cpu"
	"github.com/rlhost/rlhost/trainer/hfconfig"
)

// A packed Forward over several slots, mixing prompts of different lengths
// with single decode tokens on non-adjacent slots, gives the logits of a
// full forward of each sequence; CopyPrefix gives a slot another slot's
// prompt without recomputing it.
func TestCacheForwardPackedAndCopyPrefix(t *testing.T) {
	be := newBackend64(t)
	cfg := tinyConfig(t, true, true)
	m := randomModel(t, be, cfg, 9)
	V := cfg.VocabSize
	seqs := [][]int32{{3, 17, 5, 60, 1, 9}, {42, 7, 7, 30, 11, 12}, {8, 8, 2, 40, 50, 6}, {3, 17, 5, 61, 22, 4}}
	T := len(seqs[0])
	r, _ := m.NewRun(len(seqs), T)
	var ids []int32
	for _, s := range seqs {
		ids = append(ids, s...)
	}
	if err := r.Forward(ids, []int{T, T, T, T}); err != nil {
		t.Fatal(err)
	}
	full := download(be, r.Logits())
	check := func(b, pos int, got []float32) {
		t.Helper()
		for j := range V {
			if math.Abs(float64(got[j])-full[(b*T+pos)*V+j]) > 1e-6 {
				t.Fatalf("seq %d pos %d logit %d: cache %g, full %g", b, pos, j, got[j], full[(b*T+pos)*V+j])
			}
		}
	}
	c, err := m.NewCache(5, 8)
	if err != nil {
		t.Fatal(err)
	}
	// Slots 4, 0 and 2 hold sequences 0, 1 and 2: prompts of 3, 1 and 2.
	slot := []int{4, 0, 2}
	lg := make([]float32, 3*V)
	if err := c.Forward([]Chunk{{4, seqs[0][:3]}, {0, seqs[1][:1]}, {2, seqs[2][:2]}}, lg); err != nil {
		t.Fatal(err)
	}
	check(0, 2, lg[:V])
	check(1, 0, lg[V:2*V])
	check(2, 1, lg[2*V:])
	// Sequence 3 shares sequence 0's first 3 tokens: copy them to slot 1.
	if err := c.CopyPrefix(1, 4, 3); err != nil {
		t.Fatal(err)
	}
	if err := c.Forward([]Chunk{{1, seqs[3][3:4]}}, lg[:V]); err != nil {
		t.Fatal(err)
	}
	check(3, 3, lg[:V])
	// Mixed: a decode token for slots 4 and 2, a 2-token chunk for slot 0.
	if err := c.Forward([]Chunk{{0, seqs[1][1:3]}, {2, seqs[2][2:3]}, {4, seqs[0][3:4]}}, lg); err != nil {
		t.Fatal(err)
	}
	check(1, 2, lg[:V])
	check(2, 2, lg[V:2*V])
	check(0, 3, lg[2*V:])
	for i, want := range []int{4, 3, 3} {
		if c.Len(slot[i]) != want {
			t.Fatalf("slot %d holds %d tokens, want %d", slot[i], c.Len(slot[i]), want)
		}
	}
	// Freed and reused, a slot starts over.
	if err := c.Truncate(4, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Forward([]Chunk{{4, seqs[2][:1]}}, lg[:V]); err != nil {
		t.Fatal(err)
	}
	check(2, 0, lg[:V])
	for _, bad := range [][]Chunk{
		{{0, []int32{1}}, {0, []int32{2}}}, // slot twice
		{{5, []int32{1}}},                  // no such slot
		{{3, nil}},                         // no tokens
		{{3, make([]int32, 9)}},            // past maxT
		{{3, []int32{int32(V)}}},           // outside the vocabulary
	} {
		if err := c.Forward(bad, make([]float32, len(bad)*V)); err == nil {
			t.Fatalf("want error for %v", bad)
		}
	}
	if err := c.CopyPrefix(3, 0, 9); err == nil {
		t.Fatal("want error copying more tokens than the source holds")
	}
}

// On a device with batch-invariant linear layers, a sequence's logits are
// the same bit for bit however its tokens reach the cache: prefilled at
// once, token by token among other slots' rows, or partly copied from
// another slot (the server's prefix cache), with and without an adapter.
func TestCacheLogitsIndependentOfHowThePrefixCame(t *testing.T) {
	be, err := cpu.New(cpu.Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(be.Close)
	cfg, _ := hfconfig.Preset("1m")
	m, err := New(be, cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.Init(4, 0.3)
	seq := []int32{5, 9, 300, 44, 2, 17, 17, 90, 101, 7, 64, 3, 250, 11}
	V := cfg.VocabSize
	for _, withAdapter := range []bool{false, true} {
		c, err := m.NewCache(4, 32)
		if err != nil {
			t.Fatal(err)
		}
		if withAdapter {
			a, err := NewAdapter(be, cfg, AdapterConfig{Rank: 4, Alpha: 8, Targets: []Module{QProj, OProj, UpProj, DownProj}})
			if err != nil {
				t.Fatal(err)
			}
			a.Init(2)
			for _, p := range a.Params() {
				be.Fill(p.W, 0.01) // B too, so the adapter changes the output
			}
			if err := c.SetAdapter(a); err != nil {
				t.Fatal(err)
			}
		}
		// Cold: the whole sequence in one prefill, in slot 0.
		want := make([]float32, V)
		if err := c.Forward([]Chunk{{0, seq}}, want); err != nil {
			t.Fatal(err)
		}
		// Token by token in slot 1, batched with other rows in slots 2, 3.
		lg := make([]float32, 3*V)
		for i := range seq {
			if err := c.Forward([]Chunk{{2, []int32{int32(i + 1)}}, {1, seq[i : i+1]}, {3, []int32{8, 9, 10}[:1+i%3]}}, lg); err != nil {
				t.Fatal(err)
			}
			if i == 8 {
				_ = c.Truncate(3, 0)
			}
		}
		same(t, "token by token", lg[V:2*V], want)
		// Half copied from slot 1, the rest as one chunk next to a decode row.
		if err := c.Truncate(3, 0); err != nil {
			t.Fatal(err)
		}
		if err := c.CopyPrefix(3, 1, 6); err != nil {
			t.Fatal(err)
		}
		if err := c.Forward([]Chunk{{3, seq[6:]}, {2, []int32{1}}}, lg[:2*V]); err != nil {
			t.Fatal(err)
		}
		same(t, "copied prefix", lg[:V], want)
	}
}

func same(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for j := range want {
		if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
			t.Fatalf("%s: logit %d is %g, cold prefill %g", what, j, got[j], want[j])
		}
	}
}
