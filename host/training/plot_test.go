package training

import (
	"image/png"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"gonum.org/v1/plot"

	"github.com/rlhost/rlhost/core"
)

func TestPlotRewardsWritesAPNG(t *testing.T) {
	var steps []core.StepMetrics
	for i := range 12 {
		r := -0.5 + float64(i)/10
		steps = append(steps, core.StepMetrics{Step: i, RewardMean: r, RewardStd: 0.3, PassRate: (r + 1) / 2})
	}
	path := filepath.Join(t.TempDir(), RewardsPlot)
	for range 2 { // the second call replaces the first picture
		if err := PlotRewards(path, "test", steps); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s is not a PNG: %v", path, err)
	}
	if b := img.Bounds(); b.Dx() < 300 || b.Dy() < 150 {
		t.Errorf("image is %v", b)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".tmp-*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
	if os.Getenv("RLHOST_KEEP_PLOT") != "" {
		data, _ := os.ReadFile(path)
		_ = os.WriteFile(os.Getenv("RLHOST_KEEP_PLOT"), data, 0o644)
	}
}

// Steps sit at their own 0-based numbers, and the ±1 std band stays
// within the rewards each step observed.
func TestRewardSeries(t *testing.T) {
	steps := []core.StepMetrics{
		{Step: 0, Episodes: 8, RewardMean: 0.9, RewardStd: 0.3, RewardMin: 0, RewardMax: 1, PassRate: 0.9},
		{Step: 1, Episodes: 8, RewardMean: -0.8, RewardStd: 0.4, RewardMin: -1, RewardMax: 0, PassRate: 0},
		{Step: 2, Episodes: 8, RewardMean: 0.5, RewardStd: 0.1, RewardMin: 0, RewardMax: 1, PassRate: 0.5},
	}
	s := seriesOf(steps)
	for i, m := range steps {
		if s.mean[i].X != float64(m.Step) {
			t.Errorf("step %d drawn at x=%v", m.Step, s.mean[i].X)
		}
		if s.lo[i].Y < m.RewardMin || s.hi[i].Y > m.RewardMax {
			t.Errorf("step %d: band [%v, %v] outside the observed [%v, %v]", m.Step, s.lo[i].Y, s.hi[i].Y, m.RewardMin, m.RewardMax)
		}
	}
	if s.hi[0].Y != 1 || s.lo[1].Y != -1 || s.lo[2].Y != 0.4 || s.hi[2].Y != 0.6 {
		t.Errorf("band lo %v hi %v", s.lo, s.hi)
	}
}

func TestNiceTicks(t *testing.T) {
	labels := func(ticks []plot.Tick) []string {
		var out []string
		for _, tk := range ticks {
			out = append(out, tk.Label)
		}
		return out
	}
	for _, tc := range []struct {
		lo, hi  float64
		integer bool
		want    []string
	}{
		{-1.2, 1.1, false, []string{"-1", "-0.5", "0", "0.5", "1"}},
		{0, 1, false, []string{"0", "0.2", "0.4", "0.6", "0.8", "1"}},
		{-0.05, 0.33, false, []string{"0", "0.1", "0.2", "0.3"}},
		{0, 39, true, []string{"0", "10", "20", "30"}},
		{0, 3, true, []string{"0", "1", "2", "3"}},
		{25, 39, true, []string{"25", "30", "35"}},
		{0.5, 0.5, false, []string{"0.5"}},
	} {
		if got := labels(niceTicks{integer: tc.integer}.Ticks(tc.lo, tc.hi)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ticks of [%v, %v] = %q, want %q", tc.lo, tc.hi, got, tc.want)
		}
	}
}
