package training

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/rlhost/rlhost/core"
)

// PlotRewards draws mean reward (with a band of ±1 std) and pass rate over
// steps into path as a PNG, replacing it atomically.
func PlotRewards(path, title string, steps []core.StepMetrics) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "step"
	p.Y.Label.Text = "reward"
	mean := make(plotter.XYs, 0, len(steps))
	lo := make(plotter.XYs, 0, len(steps))
	hi := make(plotter.XYs, 0, len(steps))
	pass := make(plotter.XYs, 0, len(steps))
	for _, m := range steps {
		x := float64(m.Step + 1)
		mean = append(mean, plotter.XY{X: x, Y: m.RewardMean})
		lo = append(lo, plotter.XY{X: x, Y: m.RewardMean - m.RewardStd})
		hi = append(hi, plotter.XY{X: x, Y: m.RewardMean + m.RewardStd})
		pass = append(pass, plotter.XY{X: x, Y: m.PassRate})
	}
	line, points, err := plotter.NewLinePoints(mean)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	line.Color = color.NRGBA{R: 31, G: 119, B: 180, A: 255}
	points.Color = line.Color
	p.Add(line, points)
	p.Legend.Add("reward mean (dashed: ±1 std)", line, points)
	for _, band := range []plotter.XYs{lo, hi} {
		l, err := plotter.NewLine(band)
		if err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		l.Color = color.NRGBA{R: 31, G: 119, B: 180, A: 110}
		l.Width = vg.Points(0.8)
		l.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		p.Add(l)
	}
	pl, err := plotter.NewLine(pass)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	pl.Color = color.NRGBA{R: 44, G: 160, B: 44, A: 255}
	p.Add(pl)
	p.Legend.Add("pass rate", pl)
	if len(steps) > 0 {
		p.X.Min = float64(steps[0].Step + 1)
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	tmp := filepath.Join(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err := p.Save(7*vg.Inch, 4*vg.Inch, tmp); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}
