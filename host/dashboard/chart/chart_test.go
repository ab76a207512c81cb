package chart

import (
	"encoding/xml"
	"io"
	"strings"
	"testing"
)

func render(t *testing.T, c Chart) string {
	t.Helper()
	var b strings.Builder
	if err := c.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	// Well-formed XML: nothing a label holds can open an element.
	dec := xml.NewDecoder(strings.NewReader(b.String()))
	for {
		_, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v\n%s", err, b.String())
		}
	}
	return b.String()
}

func TestOneDotPerPoint(t *testing.T) {
	var ps []Point
	for i := range 7 {
		ps = append(ps, Point{X: i, Y: float64(i) / 10, Extra: []float64{0.1}})
	}
	svg := render(t, Chart{Title: "reward", Series: []Series{
		{Label: "a", Color: "#123456", Points: ps, Band: true, ExtraNames: []string{"std"}},
		{Label: "b", Color: "#654321", Points: ps[:3]},
	}})
	if n := strings.Count(svg, `<circle class="pt"`); n != 10 {
		t.Errorf("%d dots, want 10", n)
	}
	if n := strings.Count(svg, `<polygon class="band"`); n != 1 {
		t.Errorf("%d bands, want 1", n)
	}
	if !strings.Contains(svg, `data-points="[[0,0,0.1],[1,0.1,0.1]`) || !strings.Contains(svg, `data-s1="6"`) {
		t.Errorf("hover data missing:\n%s", svg)
	}
}

func TestManyPointsDrawALine(t *testing.T) {
	var ps []Point
	for i := range maxDots + 1 {
		ps = append(ps, Point{X: i, Y: float64(i % 7)})
	}
	svg := render(t, Chart{Title: "x", Series: []Series{{Label: "a", Color: "#000000", Points: ps}}})
	if strings.Contains(svg, "<circle") || !strings.Contains(svg, "<polyline") {
		t.Errorf("dots drawn for %d points", len(ps))
	}
}

func TestEscapesEverything(t *testing.T) {
	evil := `"><script>alert(1)</script><x a='`
	svg := render(t, Chart{Title: evil, Series: []Series{{Label: evil, Color: evil, Points: []Point{{X: 1, Y: 2}}, ExtraNames: []string{evil}}}})
	if strings.Contains(svg, "<script") || strings.Contains(svg, "<x ") {
		t.Errorf("markup got through:\n%s", svg)
	}
}

func TestEmpty(t *testing.T) {
	svg := render(t, Chart{Title: "t"})
	if !strings.Contains(svg, "no data yet") {
		t.Error(svg)
	}
}

func TestTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		want   string
	}{
		{0, 1, "0 0.2 0.4 0.6 0.8 1.0"},
		{0, 0.3, "0 0.1 0.2 0.3"},
		{-1, 1, "-1.0 -0.5 0 0.5 1.0"},
		{0, 40000, "0 10k 20k 30k 40k"},
		{0.00001, 0.00004, "1e-05 2e-05 3e-05 4e-05"},
		{12, 97, "20 40 60 80"},
	} {
		step := tickStep(tc.lo, tc.hi, tickTarget)
		var got []string
		for _, v := range ticks(tc.lo, tc.hi, tickTarget) {
			got = append(got, format(v, step))
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("ticks(%v, %v) = %v, want %s", tc.lo, tc.hi, got, tc.want)
		}
	}
	if got := intTicks(0, 39, 5); len(got) < 3 || got[0] != 0 || got[len(got)-1] > 39 {
		t.Errorf("intTicks(0, 39) = %v", got)
	}
	if got := intTicks(5, 5, 5); len(got) != 1 || got[0] != 5 {
		t.Errorf("intTicks(5, 5) = %v", got)
	}
}
