package training

import (
	"image/png"
	"os"
	"path/filepath"
	"testing"

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
