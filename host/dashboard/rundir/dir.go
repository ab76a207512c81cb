package rundir

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/host/output"
)

// Dir is one run directory, read as it is written. Refresh brings it up to
// date; the other methods are safe to call from any goroutine meanwhile.
type Dir struct {
	path string
	root *os.Root

	refreshMu sync.Mutex // one refresh at a time; guards the trackers
	traj      tracker
	metrics   tracker
	stamps    map[string]stamp // of summary.json and job.json as last read

	mu       sync.RWMutex
	version  uint64 // bumped by every refresh that changed something
	runs     []*runData
	runIdx   map[string]int32
	strs     []string
	strIdx   map[string]int32
	eps      []Episode
	epIdx    map[epKey]int32
	badLines int // trajectory lines that are not trajectories
	problems []string
	summary  *output.Summary
	job      *output.Job
	lastMod  time.Time
}

type runData struct {
	id       string
	steps    []core.StepMetrics // by step; replaced, never changed in place
	count    int                // episodes indexed, superseded ones left out
	lastStep int32              // the highest step of an episode; -1: none
}

// stamp tells a replaced or rewritten small file from the one read before.
type stamp struct {
	size int64
	mod  time.Time
	ino  os.FileInfo
}

// Open opens path as a run directory and indexes what it holds. It fails
// when path is not a directory; an empty one is fine (a run about to
// start).
func Open(path string) (*Dir, error) {
	root, err := os.OpenRoot(path)
	if err != nil {
		return nil, fmt.Errorf("open run directory: %w", err)
	}
	d := &Dir{path: path, root: root, stamps: map[string]stamp{}, runIdx: map[string]int32{},
		strIdx: map[string]int32{"": 0}, strs: []string{""}, epIdx: map[epKey]int32{}}
	if _, err := d.Refresh(); err != nil {
		root.Close()
		return nil, err
	}
	return d, nil
}

// Path is the directory as given to Open.
func (d *Dir) Path() string { return d.path }

// Close releases the directory.
func (d *Dir) Close() error { return d.root.Close() }

// IsRunDir reports whether path holds any file a run writes.
func IsRunDir(path string) bool {
	for _, name := range []string{output.MetricsFile, output.TrajectoriesFile, output.SummaryFile} {
		if st, err := os.Stat(filepath.Join(path, name)); err == nil && st.Mode().IsRegular() {
			return true
		}
	}
	return false
}

// Version changes whenever a refresh found something new.
func (d *Dir) Version() uint64 {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.version
}

// Refresh reads what was appended or replaced since the last call and
// reports whether anything changed. A file that was rewritten (a new
// inode, or shorter than what was read) is read again from the start.
func (d *Dir) Refresh() (bool, error) {
	d.refreshMu.Lock()
	defer d.refreshMu.Unlock()
	changed := false
	var errs []error
	for _, step := range []func() (bool, error){d.refreshMetrics, d.refreshTrajectories, d.refreshSmall} {
		c, err := step()
		changed = changed || c
		if err != nil {
			errs = append(errs, err)
		}
	}
	if changed {
		d.mu.Lock()
		d.version++
		d.mu.Unlock()
	}
	return changed, errors.Join(errs...)
}

// openTracked opens name for reading from where t left off; it returns a
// nil file when nothing is new, and reset when the file is not the one t
// followed.
func (d *Dir) openTracked(name string, t *tracker) (f *os.File, size int64, reset bool, err error) {
	f, err = d.root.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		reset = t.info != nil
		t.info, t.end = nil, 0
		return nil, 0, reset, nil
	}
	if err != nil {
		return nil, 0, false, fmt.Errorf("open %s: %w", name, err)
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, 0, false, fmt.Errorf("%s is not a regular file", name)
	}
	d.touch(st.ModTime())
	if t.info != nil && (!os.SameFile(t.info, st) || st.Size() < t.end || !endsLine(f, t.end)) {
		reset = true
		t.info, t.end = nil, 0
	}
	t.info = st
	if st.Size() == t.end && !reset {
		f.Close()
		return nil, st.Size(), false, nil
	}
	return f, st.Size(), reset, nil
}

// endsLine reports whether the byte before off is still a line's end.
func endsLine(f io.ReaderAt, off int64) bool {
	if off == 0 {
		return true
	}
	var b [1]byte
	_, err := f.ReadAt(b[:], off-1)
	return err == nil && b[0] == '\n'
}

func (d *Dir) touch(mod time.Time) {
	d.mu.Lock()
	if mod.After(d.lastMod) {
		d.lastMod = mod
	}
	d.mu.Unlock()
}

func (d *Dir) refreshTrajectories() (bool, error) {
	f, size, reset, err := d.openTracked(output.TrajectoriesFile, &d.traj)
	if reset {
		d.mu.Lock()
		d.eps, d.epIdx, d.badLines = nil, map[epKey]int32{}, 0
		for _, r := range d.runs {
			r.count, r.lastStep = 0, -1
		}
		d.mu.Unlock()
	}
	if f == nil || err != nil {
		return reset, err
	}
	defer f.Close()
	lines, end, err := indexRange(f, d.traj.end, size, workersFor(size-d.traj.end))
	d.traj.end = end
	d.add(lines)
	return reset || len(lines) > 0, err
}

// add appends indexed lines; a line for an episode already indexed (a
// step a resumed run did again) supersedes the earlier one.
func (d *Dir) add(lines []scanned) {
	if len(lines) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, l := range lines {
		if l.bad {
			d.badLines++
			continue
		}
		f := l.fields
		e := Episode{Off: l.off, Len: l.len, Run: d.runLocked(f.runID), Step: int32(f.step), Group: int32(f.group),
			Index: int32(f.index), Task: d.strLocked(f.taskID), Finish: d.strLocked(f.finish), Turns: int32(f.turns),
			PromptTokens: int32(f.promptTokens), CompletionTokens: int32(f.completionTokens), Reward: f.reward,
			DurationMS: float32(f.durationMS), Execs: float32(f.execs), Flags: flagsOf(f)}
		k := epKey{e.Run, e.Step, e.Group, e.Index}
		if old, ok := d.epIdx[k]; ok {
			d.eps[old].Flags |= Superseded
			d.runs[e.Run].count--
		}
		d.epIdx[k] = int32(len(d.eps))
		d.eps = append(d.eps, e)
		r := d.runs[e.Run]
		r.count++
		r.lastStep = max(r.lastStep, e.Step)
	}
}

func (d *Dir) runLocked(id string) int32 {
	if i, ok := d.runIdx[id]; ok {
		return i
	}
	i := int32(len(d.runs))
	d.runs = append(d.runs, &runData{id: id, lastStep: -1})
	d.runIdx[id] = i
	return i
}

func (d *Dir) strLocked(s string) int32 {
	if i, ok := d.strIdx[s]; ok {
		return i
	}
	i := int32(len(d.strs))
	d.strs = append(d.strs, s)
	d.strIdx[s] = i
	return i
}

// maxMetrics bounds what one refresh reads of metrics.jsonl, which is
// read whole: a step's line is a few KB.
const maxMetrics = 1 << 30

func (d *Dir) refreshMetrics() (bool, error) {
	f, size, reset, err := d.openTracked(output.MetricsFile, &d.metrics)
	if reset {
		d.mu.Lock()
		for _, r := range d.runs {
			r.steps = nil
		}
		d.problems = slices.DeleteFunc(d.problems, func(p string) bool { return strings.HasPrefix(p, output.MetricsFile) })
		d.mu.Unlock()
	}
	if f == nil || err != nil {
		return reset, err
	}
	defer f.Close()
	if size-d.metrics.end > maxMetrics {
		return reset, fmt.Errorf("%s: %d new bytes at once is not a metrics file", output.MetricsFile, size-d.metrics.end)
	}
	data := make([]byte, size-d.metrics.end)
	n, err := f.ReadAt(data, d.metrics.end)
	if err != nil && !errors.Is(err, io.EOF) {
		return reset, fmt.Errorf("read %s: %w", output.MetricsFile, err)
	}
	data = data[:n]
	last := bytes.LastIndexByte(data, '\n')
	if last < 0 {
		return reset, nil
	}
	var steps []core.StepMetrics
	var problems []string
	for off := 0; off <= last; {
		nl := bytes.IndexByte(data[off:], '\n')
		line := bytes.TrimSpace(data[off : off+nl])
		if len(line) > 0 {
			var m core.StepMetrics
			if err := json.Unmarshal(line, &m); err != nil {
				problems = append(problems, fmt.Sprintf("%s at byte %d: %v", output.MetricsFile, d.metrics.end+int64(off), err))
			} else {
				steps = append(steps, m)
			}
		}
		off += nl + 1
	}
	d.metrics.end += int64(last + 1)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.problems = append(d.problems, problems...)
	for _, m := range steps {
		r := d.runs[d.runLocked(m.RunID)]
		i, found := slices.BinarySearchFunc(r.steps, m.Step, func(a core.StepMetrics, s int) int { return cmp.Compare(a.Step, s) })
		next := slices.Clone(r.steps) // readers may hold the old slice
		if found {
			next[i] = m
		} else {
			next = slices.Insert(next, i, m)
		}
		r.steps = next
	}
	return true, nil
}

// maxSmallFile bounds summary.json, job.json and the settings files.
const maxSmallFile = 8 << 20

// refreshSmall rereads summary.json and job.json when they changed; both
// are replaced whole by a rename, so a read sees one version or the other.
func (d *Dir) refreshSmall() (bool, error) {
	changed := false
	var errs []error
	for _, name := range []string{output.SummaryFile, output.JobFile} {
		st, err := d.root.Stat(name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		d.touch(st.ModTime())
		s := stamp{size: st.Size(), mod: st.ModTime(), ino: st}
		if old, ok := d.stamps[name]; ok && old.size == s.size && old.mod.Equal(s.mod) && os.SameFile(old.ino, st) {
			continue
		}
		data, err := d.readSmall(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		d.stamps[name] = s
		changed = true
		d.mu.Lock()
		switch name {
		case output.SummaryFile:
			var sum output.Summary
			if err := json.Unmarshal(data, &sum); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			} else {
				d.summary = &sum
				if sum.RunID != "" {
					d.runLocked(sum.RunID)
				}
			}
		case output.JobFile:
			var job output.Job
			if err := json.Unmarshal(data, &job); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			} else {
				d.job = &job
				if job.RunID != "" {
					d.runLocked(job.RunID)
				}
			}
		}
		d.mu.Unlock()
	}
	return changed, errors.Join(errs...)
}

// readSmall reads a file of the directory that must be small.
func (d *Dir) readSmall(name string) ([]byte, error) {
	f, err := d.root.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxSmallFile+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if len(data) > maxSmallFile {
		return nil, fmt.Errorf("%s is larger than %d bytes", name, maxSmallFile)
	}
	return data, nil
}
