package output

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
)

// fakeClock is advanced by hand, so redraw throttling and the ETA are
// checked without sleeping.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

const clear = "\r\x1b[K"

func TestProgressOnTerminal(t *testing.T) {
	var out bytes.Buffer
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	p := newProgress(&out, true, 4, 8, 4, clk.now)

	clk.t = clk.t.Add(2 * time.Second)
	p.Trajectory(core.Trajectory{Step: 0})
	if got, want := out.String(), clear+"step 0 (1/4)  episodes 1/8 done, 4 in flight, 0 failed  ETA 14s"; got != want {
		t.Fatalf("first draw %q, want %q", got, want)
	}
	// Within the redraw interval nothing is redrawn; after it, everything
	// since shows at once.
	clk.t = clk.t.Add(10 * time.Millisecond)
	p.Trajectory(core.Trajectory{Step: 0, Error: "sandbox died"})
	if strings.Count(out.String(), clear) != 1 {
		t.Fatalf("redrawn within %s: %q", redrawEvery, out.String())
	}
	clk.t = clk.t.Add(2 * time.Second)
	p.Trajectory(core.Trajectory{Step: 0})
	if !strings.HasSuffix(out.String(), clear+"step 0 (1/4)  episodes 3/8 done, 4 in flight, 1 failed  ETA 7s") {
		t.Fatalf("second draw: %q", out.String())
	}

	// A step line replaces the status line and ends the step.
	out.Reset()
	p.Write([]byte(ProgressLine(core.StepMetrics{Step: 0, Episodes: 8}, 4) + "\n"))
	if got := out.String(); !strings.HasPrefix(got, clear+"step 0 (1/4)  episodes 8") || strings.Count(got, "\n") != 1 {
		t.Fatalf("step line %q", got)
	}
	out.Reset()
	p.Trajectory(core.Trajectory{Step: 1})
	if got := out.String(); !strings.HasPrefix(got, clear+"step 1 (2/4)  episodes 1/8 done") {
		t.Fatalf("next step: %q", got)
	}

	// Reported starts replace the concurrency estimate.
	p.Write([]byte(ProgressLine(core.StepMetrics{Step: 1, Episodes: 8}, 4) + "\n"))
	p.StepStarted(2)
	for range 3 {
		p.EpisodeStarted()
	}
	clk.t = clk.t.Add(time.Second)
	p.EpisodeFinished(false)
	if !strings.HasSuffix(out.String(), "step 2 (3/4)  episodes 1/8 done, 2 in flight, 0 failed  ETA 7s") {
		t.Fatalf("with reported starts: %q", out.String())
	}
	// The last episode of a step always draws (nothing is left to wait for).
	for range 7 {
		p.EpisodeFinished(false)
	}
	if !strings.HasSuffix(out.String(), "episodes 8/8 done, 0 in flight, 0 failed") {
		t.Fatalf("last episode: %q", out.String())
	}
}

// Not a terminal: no status line and no control characters, only the
// lines written to it.
func TestProgressPlain(t *testing.T) {
	var out bytes.Buffer
	p := NewProgress(&out, 2, 4, 2)
	for i := range 4 {
		p.Trajectory(core.Trajectory{Step: 0, Error: map[bool]string{true: "x"}[i == 0]})
	}
	if out.Len() != 0 {
		t.Fatalf("plain output drew a status line: %q", out.String())
	}
	line := ProgressLine(core.StepMetrics{Step: 0, Episodes: 4}, 2) + "\n"
	p.Write([]byte(line))
	p.Clear()
	if out.String() != line {
		t.Fatalf("plain output %q, want %q", out.String(), line)
	}
}

// Writer.OnTrajectory feeds the progress from the trajectories the runner
// writes.
func TestWriterFeedsProgress(t *testing.T) {
	w, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var got []int
	w.OnTrajectory(func(tr core.Trajectory) { got = append(got, tr.Index) })
	for i := range 3 {
		if err := w.WriteTrajectory(core.Trajectory{Index: i}); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 3 || got[2] != 2 {
		t.Fatalf("observed %v", got)
	}
}

// With rollouts running ahead of training, the status line stays on the
// oldest step without its step line, counts later steps' episodes apart,
// and moves to the next step, counts intact, once the step line is out.
func TestProgressWithStepsAhead(t *testing.T) {
	var out bytes.Buffer
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	p := newProgress(&out, true, 4, 4, 4, clk.now)
	p.StepStarted(0)
	for range 4 {
		p.EpisodeStarted()
	}
	for range 3 {
		p.Trajectory(core.Trajectory{Step: 0})
	}
	p.StepStarted(1)
	p.EpisodeStarted()
	p.EpisodeStarted()
	clk.t = clk.t.Add(time.Second)
	p.Trajectory(core.Trajectory{Step: 1, Error: "boom"})
	if !strings.HasSuffix(out.String(), "step 0 (1/4)  episodes 3/4 done, 2 in flight, 0 failed; 1 of later steps done  ETA <1s") {
		t.Fatalf("with a step ahead: %q", out.String())
	}
	p.Trajectory(core.Trajectory{Step: 0})
	out.Reset()
	p.Write([]byte(ProgressLine(core.StepMetrics{Step: 0, Episodes: 4}, 4) + "\n"))
	clk.t = clk.t.Add(time.Second)
	p.Trajectory(core.Trajectory{Step: 1})
	if !strings.HasSuffix(out.String(), "step 1 (2/4)  episodes 2/4 done, 0 in flight, 1 failed  ETA 2s") {
		t.Fatalf("after the step line: %q", out.String())
	}
}
