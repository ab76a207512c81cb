// Package chart draws line charts of per-step figures as inline SVG, for
// the dashboard: one line per run, an optional band (a mean's spread), a
// dot per step, axes with round ticks. Every point's exact value goes into
// the SVG as data, for the page's hover read-out. It deliberately does not
// lay out pages or fetch data, and it escapes every string it is given.
package chart

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
)

// Point is one step's value. Extra holds further figures shown on hover
// (Series.ExtraNames names them); with Series.Band, Extra[0] is the band's
// half-width (a standard deviation), and with Series.Clamp, Extra[1] and
// Extra[2] bound the band (the step's minimum and maximum).
type Point struct {
	X     int
	Y     float64
	Extra []float64
}

// Series is one run's line.
type Series struct {
	Label      string // the run, shown on hover
	Color      string // a CSS colour, #rrggbb
	Points     []Point
	Band       bool
	Clamp      bool
	ExtraNames []string
}

// band is the point's band, clamped when the series asks.
func (s Series) band(p Point) (lo, hi float64) {
	sd := 0.0
	if len(p.Extra) > 0 {
		sd = p.Extra[0]
	}
	lo, hi = p.Y-sd, p.Y+sd
	if s.Clamp && len(p.Extra) >= 3 {
		lo, hi = max(lo, p.Extra[1]), min(hi, p.Extra[2])
	}
	return lo, hi
}

// Chart is one figure against step.
type Chart struct {
	Title  string
	Series []Series
	// Wide draws it larger, for a figure that gets a wider box: the page
	// scales the drawing to its box, text included.
	Wide bool
}

// Layout in SVG units.
const (
	left, right, top, bottom  = 46, 10, 24, 20
	maxDots                   = 400 // more points than this get a line only
	tickTarget                = 4
	titleSize, tickSize, dotR = 12, 10, 2.2
)

func (c Chart) size() (width, height int) {
	if c.Wide {
		return 580, 250
	}
	return 360, 190
}

// WriteSVG writes the chart as an <svg> element for inline use.
func (c Chart) WriteSVG(w io.Writer) error {
	var b strings.Builder
	width, height := c.size()
	plotW, plotH := float64(width-left-right), float64(height-top-bottom)
	x0, x1, y0, y1, ok := c.bounds()
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="%s" data-x0="%d" data-x1="%d" data-s0="%d" data-s1="%d">`,
		width, height, esc(c.Title), left, left+int(plotW), x0, x1)
	fmt.Fprintf(&b, `<text class="title" x="%d" y="%d" font-size="%d">%s</text>`, left, 15, titleSize, esc(c.Title))
	if !ok {
		fmt.Fprintf(&b, `<text class="empty" x="%.0f" y="%.0f" font-size="%d" text-anchor="middle">no data yet</text></svg>`,
			left+plotW/2, top+plotH/2, tickSize)
		_, err := io.WriteString(w, b.String())
		return err
	}
	sx := func(x int) float64 {
		if x1 == x0 {
			return left + plotW/2
		}
		return left + float64(x-x0)/float64(x1-x0)*plotW
	}
	sy := func(y float64) float64 { return top + (y1-y)/(y1-y0)*plotH }

	// Grid and ticks.
	step := tickStep(y0, y1, tickTarget)
	for _, t := range ticks(y0, y1, tickTarget) {
		y := sy(t)
		fmt.Fprintf(&b, `<line class="grid" x1="%d" x2="%.0f" y1="%.1f" y2="%.1f"/>`, left, left+plotW, y, y)
		fmt.Fprintf(&b, `<text class="tick" x="%d" y="%.1f" font-size="%d" text-anchor="end">%s</text>`, left-4, y+3.5, tickSize, esc(format(t, step)))
	}
	for _, t := range intTicks(x0, x1, tickTarget+1) {
		x := sx(t)
		fmt.Fprintf(&b, `<text class="tick" x="%.1f" y="%d" font-size="%d" text-anchor="middle">%d</text>`, x, height-5, tickSize, t)
	}
	fmt.Fprintf(&b, `<rect class="frame" x="%d" y="%d" width="%.0f" height="%.0f" fill="none"/>`, left, top, plotW, plotH)

	for _, s := range c.Series {
		if len(s.Points) == 0 {
			continue
		}
		data, _ := json.Marshal(pointData(s.Points))
		names, _ := json.Marshal(s.ExtraNames)
		fmt.Fprintf(&b, `<g class="series" data-label="%s" data-color="%s" data-extra="%s" data-points="%s">`,
			esc(s.Label), esc(s.Color), esc(string(names)), esc(string(data)))
		if s.Band {
			var up, down []string
			for _, p := range s.Points {
				lo, hi := s.band(p)
				up = append(up, fmt.Sprintf("%.1f,%.1f", sx(p.X), sy(hi)))
				down = append(down, fmt.Sprintf("%.1f,%.1f", sx(p.X), sy(lo)))
			}
			for i, j := 0, len(down)-1; i < j; i, j = i+1, j-1 {
				down[i], down[j] = down[j], down[i]
			}
			fmt.Fprintf(&b, `<polygon class="band" fill="%s" points="%s %s"/>`, esc(s.Color), strings.Join(up, " "), strings.Join(down, " "))
		}
		var line []string
		for _, p := range s.Points {
			line = append(line, fmt.Sprintf("%.1f,%.1f", sx(p.X), sy(p.Y)))
		}
		fmt.Fprintf(&b, `<polyline class="line" fill="none" stroke="%s" points="%s"/>`, esc(s.Color), strings.Join(line, " "))
		if len(s.Points) <= maxDots {
			for _, p := range s.Points {
				fmt.Fprintf(&b, `<circle class="pt" cx="%.1f" cy="%.1f" r="%.1f" fill="%s" data-step="%d"><title>step %d: %s</title></circle>`,
					sx(p.X), sy(p.Y), dotR, esc(s.Color), p.X, p.X, esc(strconv.FormatFloat(p.Y, 'g', -1, 64)))
			}
		}
		b.WriteString(`</g>`)
	}
	fmt.Fprintf(&b, `<line class="guide" x1="0" x2="0" y1="%d" y2="%.0f" visibility="hidden"/>`, top, top+plotH)
	b.WriteString(`</svg>`)
	_, err := io.WriteString(w, b.String())
	return err
}

// pointData is what the page's hover reads: [x, y, extra...] per point.
func pointData(ps []Point) [][]float64 {
	out := make([][]float64, len(ps))
	for i, p := range ps {
		out[i] = append([]float64{float64(p.X), p.Y}, p.Extra...)
	}
	return out
}

// bounds are the axes' ranges: steps as they are, values padded and
// widened to round ticks.
func (c Chart) bounds() (x0, x1 int, y0, y1 float64, ok bool) {
	x0, x1 = math.MaxInt, math.MinInt
	y0, y1 = math.Inf(1), math.Inf(-1)
	for _, s := range c.Series {
		for _, p := range s.Points {
			if math.IsNaN(p.Y) || math.IsInf(p.Y, 0) {
				continue
			}
			ok = true
			x0, x1 = min(x0, p.X), max(x1, p.X)
			lo, hi := p.Y, p.Y
			if s.Band {
				lo, hi = s.band(p)
				lo, hi = min(lo, p.Y), max(hi, p.Y)
			}
			y0, y1 = min(y0, lo), max(y1, hi)
		}
	}
	if !ok {
		return 0, 0, 0, 0, false
	}
	if y0 == y1 {
		pad := math.Max(math.Abs(y0)*0.1, 1)
		if y0 == 0 {
			y0, y1 = 0, 1
		} else {
			y0, y1 = y0-pad, y1+pad
		}
	}
	step := tickStep(y0, y1, tickTarget)
	y0, y1 = math.Floor(y0/step)*step, math.Ceil(y1/step)*step
	return x0, x1, y0, y1, true
}

// tickStep is the smallest round step (1, 2 or 5 times a power of ten)
// that cuts [lo, hi] into at most n+1 parts.
func tickStep(lo, hi float64, n int) float64 {
	raw := (hi - lo) / float64(n)
	if raw <= 0 || math.IsNaN(raw) || math.IsInf(raw, 0) {
		return 1
	}
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5} {
		if (hi-lo)/(m*mag) <= float64(n+1)+1e-9 {
			return m * mag
		}
	}
	return 10 * mag
}

// ticks are the round values in [lo, hi].
func ticks(lo, hi float64, n int) []float64 {
	step := tickStep(lo, hi, n)
	var out []float64
	for k := math.Ceil(lo/step - 1e-9); k*step <= hi+step*1e-9 && len(out) < 2*n+2; k++ {
		v := k * step
		if math.Abs(v) < step*1e-9 {
			v = 0
		}
		out = append(out, v)
	}
	return out
}

// intTicks are round steps in [lo, hi].
func intTicks(lo, hi, n int) []int {
	if hi <= lo {
		return []int{lo}
	}
	step := max(1, int(tickStep(float64(lo), float64(hi), n)))
	var out []int
	for v := (lo + step - 1) / step * step; v <= hi; v += step {
		out = append(out, v)
	}
	return out
}

// format prints a tick value as briefly as its step allows: 0.25, 15k,
// 2e-05.
func format(v, step float64) string {
	a := math.Abs(v)
	switch {
	case v == 0:
		return "0"
	case a >= 1e6 || step < 1e-3:
		return strconv.FormatFloat(v, 'g', 2, 64)
	case a >= 1e4:
		return format(v/1e3, step/1e3) + "k"
	}
	decimals := max(0, int(math.Ceil(-math.Log10(step)-1e-9)))
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

// esc escapes text and attribute values alike.
func esc(s string) string { return html.EscapeString(s) }
