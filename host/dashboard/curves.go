package dashboard

import (
	"html/template"
	"slices"
	"strings"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/host/dashboard/chart"
)

// curveGroup is a section of charts: one figure per chart, one line per
// run.
type curveGroup struct {
	ID, Title string
	Charts    []template.HTML
}

// figure is one per-step figure of metrics.jsonl.
type figure struct {
	title string // the Extra key, or a name for a field of StepMetrics
	get   func(core.StepMetrics) (float64, bool)
	wide  bool
}

// Sections of the curves, by prefix of the Extra key; keys without a
// prefix describe the episodes.
var sections = []struct{ prefix, id, title string }{
	{"metric/", "env", "Environment metrics"},
	{"train/", "train", "Training"},
	{"time/", "time", "Time"},
	{"", "episodes", "Episodes"},
	{"finish/", "finish", "Finish reasons (episodes)"},
}

func fixed(title string, f func(core.StepMetrics) float64) figure {
	return figure{title: title, get: func(m core.StepMetrics) (float64, bool) { return f(m), true }}
}

func extra(key string) figure {
	return figure{title: key, get: func(m core.StepMetrics) (float64, bool) {
		v, ok := m.Extra[key]
		return v, ok
	}}
}

// curves lays out the charts of runs: reward and pass rate first, then a
// section per kind of figure, then one per other prefix (async/, sync/,
// ...), so a figure the runner or trainer adds later shows up unasked.
func curves(runs []runRef) []curveGroup {
	top := curveGroup{ID: "reward", Title: "Reward"}
	pass := fixed("pass rate", func(m core.StepMetrics) float64 { return m.PassRate })
	pass.wide = true
	top.Charts = append(top.Charts, rewardChart(runs), lineChart(runs, pass))
	groups := map[string]*curveGroup{}
	var other []string
	for _, sec := range sections {
		groups[sec.prefix] = &curveGroup{ID: sec.id, Title: sec.title}
	}
	groups["time/"].Charts = append(groups["time/"].Charts,
		lineChart(runs, fixed("step duration (s)", func(m core.StepMetrics) float64 { return m.DurationMS / 1000 })))
	groups[""].Charts = append(groups[""].Charts,
		lineChart(runs, fixed("episodes", func(m core.StepMetrics) float64 { return float64(m.Episodes) })),
		lineChart(runs, fixed("errors", func(m core.StepMetrics) float64 { return float64(m.Errors) })),
		lineChart(runs, fixed("timeouts", func(m core.StepMetrics) float64 { return float64(m.Timeouts) })))
	for _, k := range extraKeys(runs) {
		prefix := ""
		if i := strings.IndexByte(k, '/'); i >= 0 {
			prefix = k[:i+1]
		}
		g, ok := groups[prefix]
		if !ok {
			g = &curveGroup{ID: "x-" + strings.TrimSuffix(prefix, "/"), Title: strings.TrimSuffix(prefix, "/")}
			groups[prefix] = g
			other = append(other, prefix)
		}
		g.Charts = append(g.Charts, lineChart(runs, extra(k)))
	}
	out := []curveGroup{top}
	for _, sec := range sections {
		if g := groups[sec.prefix]; len(g.Charts) > 0 {
			out = append(out, *g)
		}
	}
	slices.Sort(other)
	for _, p := range other {
		out = append(out, *groups[p])
	}
	return out
}

// rewardChart draws the reward's mean with a band of one standard
// deviation, cut to the step's minimum and maximum (rewards of 0 and 1
// have a spread that would reach past both); hovering shows all four.
func rewardChart(runs []runRef) template.HTML {
	c := chart.Chart{Title: "reward (mean ± std)", Wide: true}
	for _, r := range runs {
		s := chart.Series{Label: r.Key, Color: r.Color, Band: true, ExtraNames: []string{"std", "min", "max"}}
		for _, m := range r.Steps {
			s.Points = append(s.Points, chart.Point{X: m.Step, Y: m.RewardMean, Extra: []float64{m.RewardStd, m.RewardMin, m.RewardMax}})
		}
		s.Clamp = true
		c.Series = append(c.Series, s)
	}
	return svg(c)
}

func lineChart(runs []runRef, f figure) template.HTML {
	c := chart.Chart{Title: f.title, Wide: f.wide}
	for _, r := range runs {
		s := chart.Series{Label: r.Key, Color: r.Color}
		for _, m := range r.Steps {
			if v, ok := f.get(m); ok {
				s.Points = append(s.Points, chart.Point{X: m.Step, Y: v})
			}
		}
		c.Series = append(c.Series, s)
	}
	return svg(c)
}

// svg renders a chart for the page. The chart package escapes every
// string it is given, so its output is trusted as markup.
func svg(c chart.Chart) template.HTML {
	var b strings.Builder
	c.WriteSVG(&b)
	return template.HTML(b.String())
}
