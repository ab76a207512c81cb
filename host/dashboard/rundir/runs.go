package rundir

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/host/output"
)

// Run is one run of a directory: a directory holds several when runs were
// appended to it (rlhost run --append), told apart by their run ids.
type Run struct {
	ID    string
	Steps []core.StepMetrics // by step; shared, do not modify
	// Episodes counts the run's indexed episodes; LastStep is the highest
	// step among them (-1 with none).
	Episodes int
	LastStep int
	// Summary and Job are summary.json and job.json when they belong to
	// this run (they describe the directory's newest run only).
	Summary *output.Summary
	Job     *output.Job
	// Latest is set on the directory's newest run.
	Latest bool
}

// Status is the directory as a whole.
type Status struct {
	Path      string
	LastWrite time.Time // newest modification time of the files read
	BadLines  int       // trajectory lines that are not trajectories
	Problems  []string  // metrics lines that could not be read
}

// Runs lists the directory's runs in the order they first appeared.
func (d *Dir) Runs() []Run {
	d.mu.RLock()
	defer d.mu.RUnlock()
	latest := ""
	if d.summary != nil {
		latest = d.summary.RunID
	} else if len(d.runs) > 0 {
		latest = d.runs[len(d.runs)-1].id
	}
	var out []Run
	for _, r := range d.runs {
		run := Run{ID: r.id, Steps: r.steps, Episodes: r.count, LastStep: int(r.lastStep), Latest: r.id == latest}
		if d.summary != nil && d.summary.RunID == r.id {
			run.Summary = d.summary
		}
		if d.job != nil && (d.job.RunID == r.id || d.job.RunID == "" && run.Latest) {
			run.Job = d.job
		}
		if len(run.Steps) == 0 && run.Episodes == 0 && run.Summary == nil && run.Job == nil {
			continue // its files were removed (an --overwrite)
		}
		out = append(out, run)
	}
	return out
}

// Status describes the directory itself.
func (d *Dir) Status() Status {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return Status{Path: d.path, LastWrite: d.lastMod, BadLines: d.badLines, Problems: slices.Clone(d.problems)}
}

// Filter selects episodes of one run.
type Filter struct {
	Run    string
	Step   int    // < 0: every step
	Task   string // a part of the task id, ASCII case ignored; "": any
	Finish string // the finish reason; "": any
	// MinReward and MaxReward bound the reward, inclusive; NaN: unbounded.
	MinReward, MaxReward float64
}

// AllSteps is Filter.Step for every step.
const AllSteps = -1

// NewFilter selects every episode of run.
func NewFilter(run string) Filter {
	return Filter{Run: run, Step: AllSteps, MinReward: math.NaN(), MaxReward: math.NaN()}
}

// Episodes returns the episodes f selects, by step, group and index.
func (d *Dir) Episodes(f Filter) []Episode {
	d.mu.RLock()
	run, ok := d.runIdx[f.Run]
	if !ok {
		d.mu.RUnlock()
		return nil
	}
	task := []byte(f.Task)
	var tasks map[int32]bool // task ids that match, decided once each
	if f.Task != "" {
		tasks = map[int32]bool{}
	}
	var out []Episode
	for _, e := range d.eps {
		if e.Run != run || e.Flags&Superseded != 0 || f.Step >= 0 && int(e.Step) != f.Step ||
			f.Finish != "" && d.strs[e.Finish] != f.Finish ||
			!math.IsNaN(f.MinReward) && e.Reward < f.MinReward || !math.IsNaN(f.MaxReward) && e.Reward > f.MaxReward {
			continue
		}
		if tasks != nil {
			m, seen := tasks[e.Task]
			if !seen {
				m = indexFold([]byte(d.strs[e.Task]), task) >= 0
				tasks[e.Task] = m
			}
			if !m {
				continue
			}
		}
		out = append(out, e)
	}
	d.mu.RUnlock()
	slices.SortFunc(out, func(a, b Episode) int {
		return cmp.Or(cmp.Compare(a.Step, b.Step), cmp.Compare(a.Group, b.Group), cmp.Compare(a.Index, b.Index))
	})
	return out
}

// Find returns run's episode step/group/index.
func (d *Dir) Find(run string, step, group, index int) (Episode, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	r, ok := d.runIdx[run]
	if !ok {
		return Episode{}, false
	}
	i, ok := d.epIdx[epKey{r, int32(step), int32(group), int32(index)}]
	if !ok {
		return Episode{}, false
	}
	return d.eps[i], true
}

// Str is the task id or finish reason an Episode field refers to.
func (d *Dir) Str(i int32) string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if i < 0 || int(i) >= len(d.strs) {
		return ""
	}
	return d.strs[i]
}

// Values lists the distinct task ids and finish reasons of run's episodes,
// sorted, for filter menus.
func (d *Dir) Values(run string) (tasks, finishes []string) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	r, ok := d.runIdx[run]
	if !ok {
		return nil, nil
	}
	ts, fs := map[int32]bool{}, map[int32]bool{}
	for _, e := range d.eps {
		if e.Run == r {
			ts[e.Task], fs[e.Finish] = true, true
		}
	}
	for i := range ts {
		tasks = append(tasks, d.strs[i])
	}
	for i := range fs {
		finishes = append(finishes, d.strs[i])
	}
	slices.Sort(tasks)
	slices.Sort(finishes)
	return tasks, finishes
}

// Line reads the episode's line from trajectories.jsonl.
func (d *Dir) Line(e Episode) ([]byte, error) {
	f, err := d.root.Open(output.TrajectoriesFile)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", output.TrajectoriesFile, err)
	}
	defer f.Close()
	b := make([]byte, e.Len)
	if _, err := f.ReadAt(b, e.Off); err != nil {
		return nil, fmt.Errorf("read %s at byte %d: %w", output.TrajectoriesFile, e.Off, err)
	}
	if err := d.same(e, b); err != nil {
		return nil, err
	}
	return b, nil
}

// same checks that line is still the episode indexed at its offset: the
// file may have been rewritten since the last refresh.
func (d *Dir) same(e Episode, line []byte) error {
	f, err := scanLine(line)
	if err == nil && int32(f.step) == e.Step && int32(f.group) == e.Group && int32(f.index) == e.Index {
		d.mu.RLock()
		ok := int(e.Run) < len(d.runs) && d.runs[e.Run].id == f.runID
		d.mu.RUnlock()
		if ok {
			return nil
		}
	}
	return fmt.Errorf("%s changed at byte %d since it was indexed; it is read again shortly", output.TrajectoriesFile, e.Off)
}

// Trajectory reads and decodes the episode.
func (d *Dir) Trajectory(e Episode) (core.Trajectory, error) {
	var t core.Trajectory
	line, err := d.Line(e)
	if err != nil {
		return t, err
	}
	if err := json.Unmarshal(line, &t); err != nil {
		return t, fmt.Errorf("%s at byte %d: %w", output.TrajectoriesFile, e.Off, err)
	}
	return t, nil
}
