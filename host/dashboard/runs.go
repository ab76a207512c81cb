package dashboard

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/host/dashboard/rundir"
	"github.com/rlhost/rlhost/host/output"
)

// palette colours runs in the order the page lists them.
var palette = []string{"#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#a16207", "#db2777"}

// runRef is one run the server shows: its directory, the run, and the key
// its URLs use (the run id; a second copy of the same run gets ~2).
type runRef struct {
	rundir.Run
	Key    string
	Color  string
	Dir    *rundir.Dir
	Status rundir.Status
	Live   *Live // the run this process runs; nil for others
}

// runs lists every run of every directory, in order.
func (s *Server) runs() []runRef {
	var out []runRef
	seen := map[string]int{}
	for i, d := range s.dirList() {
		st := d.Status()
		for _, r := range d.Runs() {
			ref := runRef{Run: r, Key: r.ID, Dir: d, Status: st}
			if ref.Key == "" {
				ref.Key = "run"
			}
			if n := seen[ref.Key]; n > 0 {
				seen[ref.Key]++
				ref.Key = fmt.Sprintf("%s~%d", ref.Key, n+1)
			} else {
				seen[ref.Key] = 1
			}
			if i == 0 && s.opt.Live != nil && r.Latest {
				ref.Live = s.opt.Live
			}
			ref.Color = palette[len(out)%len(palette)]
			out = append(out, ref)
		}
	}
	return out
}

func (s *Server) run(key string) (runRef, bool) {
	for _, r := range s.runs() {
		if r.Key == key {
			return r, true
		}
	}
	return runRef{}, false
}

// runView is a run as the pages name it.
type runView struct {
	Key, ID, Color, Dir string
	Status, StatusClass string
	Selected            bool
	StepsDone, Total    int
	Episodes            int
	Reward, Pass        string // the last step's
	RolloutsURL         string
	SettingsURL         string
}

func (s *Server) view(r runRef) runView {
	v := runView{Key: r.Key, ID: r.ID, Color: r.Color, Dir: r.Dir.Path(), Episodes: r.Episodes, StepsDone: len(r.Steps),
		RolloutsURL: "/runs/" + pathEscape(r.Key) + "/rollouts", SettingsURL: "/runs/" + pathEscape(r.Key) + "/settings"}
	v.Status, v.StatusClass = s.status(r)
	if r.Summary != nil {
		v.Total = r.Summary.TotalSteps
	} else if r.Job != nil {
		v.Total = r.Job.Steps
	}
	if n := len(r.Steps); n > 0 {
		last := r.Steps[n-1]
		v.Reward, v.Pass = num(last.RewardMean), pct(last.PassRate)
	}
	return v
}

// staleAfter is how long a run may go without writing before the page
// says so: the longer of five minutes and three typical steps.
func staleAfter(steps []core.StepMetrics) time.Duration {
	var d []float64
	for _, m := range steps {
		d = append(d, m.DurationMS)
	}
	wait := 5 * time.Minute
	if len(d) > 0 {
		slices.Sort(d)
		wait = max(wait, 3*time.Duration(d[len(d)/2]*float64(time.Millisecond)))
	}
	return wait
}

// status says whether the run goes on: from the process itself for the
// run it runs, else from summary.json (whose end time is set when a run
// ends in any way but a kill) and how long ago the files last changed.
func (s *Server) status(r runRef) (text, class string) {
	if r.Live != nil && !r.Live.counts().ended {
		return "running", "running"
	}
	done := 0 // steps on disk, a resumed run's earlier ones included
	if n := len(r.Steps); n > 0 {
		done = r.Steps[n-1].Step + 1
	}
	if sum := r.Summary; sum != nil {
		switch {
		case sum.Interrupted:
			return "interrupted", "warn"
		case !sum.EndedAt.IsZero() && sum.TotalSteps > 0 && done < sum.TotalSteps:
			return fmt.Sprintf("stopped after %d of %d steps", done, sum.TotalSteps), "bad"
		case !sum.EndedAt.IsZero():
			return "finished", "done"
		}
	} else if !r.Latest {
		return "finished", "done" // another run was appended to the directory after it
	}
	if r.Live != nil {
		return "finished", "done"
	}
	idle := s.now().Sub(r.Status.LastWrite)
	if !r.Status.LastWrite.IsZero() && idle > staleAfter(r.Steps) {
		return fmt.Sprintf("no writes for %s: still running, or stopped without finishing", roundAgo(idle)), "warn"
	}
	return "running", "running"
}

// healthView is the run at a glance.
type healthView struct {
	Run      runView
	Items    []item
	Async    []item // async/*, sync/* and staleness figures of the last step
	Problems []string
}

type item struct {
	Label, Value, Note, Class string
}

func (s *Server) health(r runRef) healthView {
	h := healthView{Run: s.view(r)}
	add := func(label, value, note, class string) {
		h.Items = append(h.Items, item{label, value, note, class})
	}
	add("status", h.Run.Status, "last write "+ago(s.now(), r.Status.LastWrite), h.Run.StatusClass)
	if h.Run.Total > 0 {
		add("steps", fmt.Sprintf("%d of %d", h.Run.StepsDone, h.Run.Total), "", "")
	} else {
		add("steps", fmt.Sprint(h.Run.StepsDone), "", "")
	}
	if flight, note, ok := s.inFlight(r, h.Run.StatusClass == "running"); ok {
		add("in flight", flight, note, "")
	}
	var errs, timeouts, lastErrs, lastTimeouts int
	var execs, execTimeouts float64
	for _, m := range r.Steps {
		errs += m.Errors
		timeouts += m.Timeouts
		use, _ := output.MeanSandboxUseOf(m.Extra)
		execs += use.Execs * float64(m.Episodes)
		execTimeouts += use.Timeouts * float64(m.Episodes)
	}
	var last core.StepMetrics
	if n := len(r.Steps); n > 0 {
		last = r.Steps[n-1]
		lastErrs, lastTimeouts = last.Errors, last.Timeouts
	}
	add("errors", comma(errs), fmt.Sprintf("%d in the last step", lastErrs), classIf(lastErrs > 0, "bad"))
	add("timeouts", comma(timeouts), fmt.Sprintf("%d in the last step", lastTimeouts), classIf(lastTimeouts > 0, "warn"))
	add("sandbox execs", comma(int(math.Round(execs))), fmt.Sprintf("%s hit their time limit", comma(int(math.Round(execTimeouts)))), classIf(execTimeouts > 0, "warn"))
	var finishes []string
	for _, k := range slices.Sorted(maps.Keys(last.Extra)) {
		if reason, ok := strings.CutPrefix(k, "finish/"); ok {
			finishes = append(finishes, fmt.Sprintf("%s %s", reason, num(last.Extra[k])))
		}
	}
	if len(finishes) > 0 {
		add("last step ended", strings.Join(finishes, " · "), "", "")
	}
	for _, k := range slices.Sorted(maps.Keys(last.Extra)) {
		if isAsync(k) {
			h.Async = append(h.Async, item{Label: k, Value: num(last.Extra[k])})
		}
	}
	h.Problems = r.Status.Problems
	if r.Status.BadLines > 0 {
		h.Problems = append(h.Problems, fmt.Sprintf("%d lines of trajectories.jsonl are not trajectories and are left out", r.Status.BadLines))
	}
	s.mu.Lock()
	if e := s.errs[r.Dir.Path()]; e != "" {
		h.Problems = append(h.Problems, e)
	}
	s.mu.Unlock()
	return h
}

// isAsync picks the figures an asynchronous run reports about how far
// its samples lag the weights being trained.
func isAsync(key string) bool {
	return strings.HasPrefix(key, "async/") || strings.HasPrefix(key, "sync/") || strings.Contains(key, "stale")
}

// inFlight is the number of episodes running now: counted by the runner
// for the run this process runs, else estimated from job.json and the
// episodes of the current step on disk.
func (s *Server) inFlight(r runRef, running bool) (value, note string, ok bool) {
	perStep := 0
	if r.Job != nil {
		perStep = r.Job.BatchSize * r.Job.GroupSize
	}
	if r.Live != nil {
		c := r.Live.counts()
		if c.ended {
			return "0", "the run has ended", true
		}
		note := fmt.Sprintf("%d done in step %d", c.finished, c.step)
		if perStep > 0 {
			note = fmt.Sprintf("%d of %d done in step %d", c.finished, perStep, c.step)
		}
		if c.failed > 0 {
			note += fmt.Sprintf(", %d failed", c.failed)
		}
		return fmt.Sprint(c.inFlight), note, true
	}
	if !running || r.Job == nil || perStep == 0 {
		return "", "", false
	}
	step := 0
	if n := len(r.Steps); n > 0 {
		step = r.Steps[n-1].Step + 1
	}
	f := rundir.NewFilter(r.ID)
	f.Step = step
	done := len(r.Dir.Episodes(f))
	left := max(0, perStep-done)
	if r.Job.Concurrency > 0 {
		left = min(left, r.Job.Concurrency)
	}
	return fmt.Sprintf("about %d", left), fmt.Sprintf("%d of %d done in step %d; estimated from the files (exact under rlhost run --ui)", done, perStep, step), true
}

func classIf(cond bool, class string) string {
	if cond {
		return class
	}
	return ""
}

// extraKeys returns the union of the Extra keys of the runs' steps, sorted.
func extraKeys(runs []runRef) []string {
	set := map[string]bool{}
	for _, r := range runs {
		for _, m := range r.Steps {
			for k := range m.Extra {
				set[k] = true
			}
		}
	}
	keys := slices.Collect(maps.Keys(set))
	sort.Strings(keys)
	return keys
}
