package training

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/rlhost/rlhost/core"
)

// PlotRewards draws mean reward (with a band of ±1 std) and pass rate over
// steps into path as a PNG, replacing it atomically. Steps are numbered
// as in metrics.jsonl, from 0.
func PlotRewards(path, title string, steps []core.StepMetrics) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "step"
	p.Y.Label.Text = "reward"
	s := seriesOf(steps)
	line, points, err := plotter.NewLinePoints(s.mean)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	line.Color = color.NRGBA{R: 31, G: 119, B: 180, A: 255}
	points.Color = line.Color
	p.Add(line, points)
	p.Legend.Add("reward mean (dashed: ±1 std, within min and max)", line, points)
	for _, band := range []plotter.XYs{s.lo, s.hi} {
		l, err := plotter.NewLine(band)
		if err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		l.Color = color.NRGBA{R: 31, G: 119, B: 180, A: 110}
		l.Width = vg.Points(0.8)
		l.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		p.Add(l)
	}
	pl, err := plotter.NewLine(s.pass)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	pl.Color = color.NRGBA{R: 44, G: 160, B: 44, A: 255}
	p.Add(pl)
	p.Legend.Add("pass rate", pl)
	if len(steps) > 0 {
		p.X.Min = float64(steps[0].Step)
	}
	// Room above the lines for the legend.
	p.Y.Max += 0.2 * (p.Y.Max - p.Y.Min)
	p.X.Tick.Marker = niceTicks{integer: true}
	p.Y.Tick.Marker = niceTicks{}
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

// series is what the plot draws, one point per step.
type series struct{ mean, lo, hi, pass plotter.XYs }

// seriesOf places each step at its own number. The ±1 std band is kept
// within the step's observed rewards: a mean of 0.9 with std 0.3 over
// rewards in [0, 1] has nothing above 1 to show.
func seriesOf(steps []core.StepMetrics) series {
	var s series
	for _, m := range steps {
		x := float64(m.Step)
		lo, hi := m.RewardMean-m.RewardStd, m.RewardMean+m.RewardStd
		if m.Episodes > 0 && m.RewardMin <= m.RewardMax {
			lo, hi = max(lo, m.RewardMin), min(hi, m.RewardMax)
		}
		s.mean = append(s.mean, plotter.XY{X: x, Y: m.RewardMean})
		s.lo = append(s.lo, plotter.XY{X: x, Y: lo})
		s.hi = append(s.hi, plotter.XY{X: x, Y: hi})
		s.pass = append(s.pass, plotter.XY{X: x, Y: m.PassRate})
	}
	return s
}

// niceTicks labels an axis at round values, 1, 2, 2.5 or 5 times a power
// of ten apart, about five of them, written as briefly as they allow
// ("-1", "-0.5", "0", "0.5", "1"). integer keeps the step at 1 or more,
// for step numbers.
type niceTicks struct{ integer bool }

func (n niceTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) || math.IsInf(hi-lo, 0) {
		return []plot.Tick{{Value: lo, Label: strconv.FormatFloat(lo, 'f', -1, 64)}}
	}
	raw := (hi - lo) / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * mag
	for _, f := range []float64{1, 2, 2.5, 5} {
		if f*mag >= raw {
			step = f * mag
			break
		}
	}
	if n.integer {
		step = math.Max(1, math.Round(step))
	}
	var ticks []plot.Tick
	for i := math.Ceil(lo / step); i*step <= hi+step*1e-9; i++ {
		v := i * step
		if math.Abs(v) < step*1e-9 {
			v = 0 // not -0
		}
		// Rounded to the step's precision, so 0.1*3 prints as 0.3.
		p := math.Pow(10, float64(decimals(step)))
		v = math.Round(v*p) / p
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
	}
	return ticks
}

// decimals is how many digits after the point a multiple of step needs.
func decimals(step float64) int {
	for d := 0; d < 10; d++ {
		if s := step * math.Pow(10, float64(d)); math.Abs(s-math.Round(s)) < 1e-9 {
			return d
		}
	}
	return 10
}
