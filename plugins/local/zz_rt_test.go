package local

import (
	"context"
	"os/exec"
	"sort"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
)

func TestZZRoundTrip(t *testing.T) {
	b := newBackend(t, nil, core.SandboxSpec{})
	id := create(t, b, core.SandboxSpec{})
	var rt, in, bare []float64
	for i := 0; i < 300; i++ {
		t0 := time.Now()
		r, _ := b.Exec(context.Background(), id, core.ExecRequest{Command: []string{"/bin/true"}})
		rt = append(rt, float64(time.Since(t0).Microseconds()))
		in = append(in, r.DurationMS*1000)
		t1 := time.Now()
		exec.Command("/bin/true").Run()
		bare = append(bare, float64(time.Since(t1).Microseconds()))
	}
	for name, v := range map[string][]float64{"roundtrip": rt, "in-init": in, "bare": bare} {
		sort.Float64s(v)
		t.Logf("%s p50 %.0fus p10 %.0fus", name, v[len(v)/2], v[len(v)/10])
	}
}
