package rundir

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/host/dashboard/fakerun"
	"github.com/rlhost/rlhost/host/output"
)

var small = fakerun.Options{RunID: "run-a", Steps: 3, Groups: 2, GroupSize: 4, Turns: 2, ToolOutput: 200, TokenIDs: 4, Seed: 1, Hostile: true}

func writeRun(t *testing.T, dir string, opt fakerun.Options) []core.StepMetrics {
	t.Helper()
	ms, err := fakerun.Write(dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

func open(t *testing.T, dir string) *Dir {
	t.Helper()
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func TestOpenReadsRun(t *testing.T) {
	dir := t.TempDir()
	ms := writeRun(t, dir, small)
	d := open(t, dir)
	runs := d.Runs()
	if len(runs) != 1 {
		t.Fatalf("runs %+v", runs)
	}
	r := runs[0]
	if r.ID != "run-a" || len(r.Steps) != 3 || r.Episodes != 24 || r.Summary == nil || r.Job == nil || !r.Latest {
		t.Fatalf("run %+v", r)
	}
	if r.Steps[2].RewardMean != ms[2].RewardMean || r.Job.GroupSize != 4 || r.Summary.StepsDone != 3 {
		t.Errorf("steps %+v job %+v summary %+v", r.Steps[2], r.Job, r.Summary)
	}
	eps := d.Episodes(NewFilter("run-a"))
	if len(eps) != 24 {
		t.Fatalf("%d episodes", len(eps))
	}
	if !slices.IsSortedFunc(eps, func(a, b Episode) int { return int(a.Step-b.Step)*100 + int(a.Group-b.Group)*10 + int(a.Index-b.Index) }) {
		t.Errorf("episodes not by step, group, index")
	}
	// Every indexed episode reads back as the trajectory on its line.
	for _, e := range eps {
		tr, err := d.Trajectory(e)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Step != int(e.Step) || tr.Group != int(e.Group) || tr.Index != int(e.Index) || tr.Reward != e.Reward ||
			tr.TaskID != d.Str(e.Task) || tr.FinishReason != d.Str(e.Finish) || int(e.Turns) != len(tr.Turns) ||
			e.Is(Passed) != output.Passed(tr) || e.Is(TimedOut) != output.TimedOut(tr) || e.Is(Errored) != (tr.Error != "") {
			t.Errorf("%s: index %+v, line %+v", e.Key(), e, tr)
		}
	}
}

func TestFilter(t *testing.T) {
	dir := t.TempDir()
	writeRun(t, dir, small)
	d := open(t, dir)
	all := d.Episodes(NewFilter("run-a"))
	for _, tc := range []struct {
		name string
		edit func(*Filter)
		keep func(Episode) bool
	}{
		{"step", func(f *Filter) { f.Step = 1 }, func(e Episode) bool { return e.Step == 1 }},
		{"task", func(f *Filter) { f.Task = "SORT" }, func(e Episode) bool { return strings.Contains(d.Str(e.Task), "sort") }},
		{"finish", func(f *Filter) { f.Finish = "done" }, func(e Episode) bool { return d.Str(e.Finish) == "done" }},
		{"min", func(f *Filter) { f.MinReward = 0.5 }, func(e Episode) bool { return e.Reward >= 0.5 }},
		{"range", func(f *Filter) { f.MinReward, f.MaxReward = 0.2, 0.6 }, func(e Episode) bool { return e.Reward >= 0.2 && e.Reward <= 0.6 }},
		{"other run", func(f *Filter) { f.Run = "nope" }, func(Episode) bool { return false }},
	} {
		f := NewFilter("run-a")
		tc.edit(&f)
		got := d.Episodes(f)
		want := slices.DeleteFunc(slices.Clone(all), func(e Episode) bool { return !tc.keep(e) })
		if !slices.Equal(got, want) {
			t.Errorf("%s: %d episodes, want %d", tc.name, len(got), len(want))
		}
		if tc.name != "other run" && len(want) == 0 {
			t.Errorf("%s: the fixture has no episode to keep", tc.name)
		}
	}
}

// The index follows the file as the run appends to it, and leaves a
// partial last line for later.
func TestRefreshFollowsGrowth(t *testing.T) {
	dir := t.TempDir()
	writeRun(t, dir, small)
	d := open(t, dir)
	v := d.Version()
	if changed, err := d.Refresh(); changed || err != nil || d.Version() != v {
		t.Fatalf("refresh with nothing new: changed %v, err %v", changed, err)
	}
	next := small
	next.Start, next.Steps = 3, 1
	var buf bytes.Buffer
	tr := core.Trajectory{RunID: "run-a", Step: 3, Group: 0, Index: 0, TaskID: "late", FinishReason: "done", Reward: 0.25}
	line, _ := json.Marshal(tr)
	buf.Write(line)
	path := filepath.Join(dir, output.TrajectoriesFile)
	appendFile(t, path, string(line[:20]))
	if _, err := d.Refresh(); err != nil {
		t.Fatal(err)
	}
	if _, ok := d.Find("run-a", 3, 0, 0); ok {
		t.Fatal("a partial line was indexed")
	}
	appendFile(t, path, string(line[20:])+"\n")
	if changed, err := d.Refresh(); !changed || err != nil {
		t.Fatalf("changed %v, err %v", changed, err)
	}
	e, ok := d.Find("run-a", 3, 0, 0)
	if !ok || d.Str(e.Task) != "late" || e.Reward != 0.25 {
		t.Fatalf("appended episode: %+v %v", e, ok)
	}
	m, _ := json.Marshal(core.StepMetrics{RunID: "run-a", Step: 3, Episodes: 1, RewardMean: 0.25})
	appendFile(t, filepath.Join(dir, output.MetricsFile), string(m)+"\n")
	d.Refresh()
	if r := d.Runs()[0]; len(r.Steps) != 4 || r.Steps[3].RewardMean != 0.25 || r.Episodes != 25 {
		t.Fatalf("after a step: %d steps, %d episodes", len(r.Steps), r.Episodes)
	}
	if d.Version() == v {
		t.Error("version did not change")
	}
}

// A file replaced by another (--overwrite, a resume's trim) is read again.
func TestRefreshRereadsReplacedFiles(t *testing.T) {
	dir := t.TempDir()
	writeRun(t, dir, small)
	d := open(t, dir)
	other := t.TempDir()
	opt := small
	opt.RunID, opt.Steps = "run-b", 1
	writeRun(t, other, opt)
	for _, name := range []string{output.TrajectoriesFile, output.MetricsFile, output.SummaryFile, output.JobFile} {
		if err := os.Rename(filepath.Join(other, name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.Refresh(); err != nil {
		t.Fatal(err)
	}
	runs := d.Runs()
	if len(runs) != 1 || runs[0].ID != "run-b" || runs[0].Episodes != 8 || len(runs[0].Steps) != 1 {
		t.Fatalf("after replacing: %+v", runs)
	}
	// Rewritten in place, to a different line of the same length.
	path := filepath.Join(dir, output.TrajectoriesFile)
	data, _ := os.ReadFile(path)
	e := d.Episodes(NewFilter("run-b"))[0]
	changed := bytes.Replace(data, []byte(`"run_id":"run-b"`), []byte(`"run_id":"run-c"`), 1)
	if err := os.WriteFile(path, changed, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Line(e); err == nil || !strings.Contains(err.Error(), "changed") {
		t.Errorf("reading a rewritten line: %v", err)
	}
}

// A step done again by a resumed run supersedes the first attempt.
func TestResumedStepSupersedes(t *testing.T) {
	dir := t.TempDir()
	writeRun(t, dir, small)
	d := open(t, dir)
	line, _ := json.Marshal(core.Trajectory{RunID: "run-a", Step: 2, Group: 1, Index: 3, TaskID: "again", Reward: 0.75})
	appendFile(t, filepath.Join(dir, output.TrajectoriesFile), string(line)+"\n")
	d.Refresh()
	f := NewFilter("run-a")
	f.Step = 2
	eps := d.Episodes(f)
	if len(eps) != 8 {
		t.Fatalf("%d episodes in step 2, want 8", len(eps))
	}
	e, _ := d.Find("run-a", 2, 1, 3)
	if d.Str(e.Task) != "again" || !slices.Contains(eps, e) || d.Runs()[0].Episodes != 24 {
		t.Errorf("superseding episode %+v", e)
	}
}

// Runs appended to one directory are told apart by their ids; summary.json
// belongs to the newest.
func TestAppendedRuns(t *testing.T) {
	dir := t.TempDir()
	writeRun(t, dir, small)
	opt := small
	opt.RunID, opt.Steps = "run-b", 2
	writeRun(t, dir, opt)
	d := open(t, dir)
	runs := d.Runs()
	if len(runs) != 2 || runs[0].ID != "run-a" || runs[1].ID != "run-b" {
		t.Fatalf("runs %+v", runs)
	}
	if runs[0].Summary != nil || runs[0].Latest || runs[1].Summary == nil || !runs[1].Latest || len(runs[1].Steps) != 2 || runs[0].Episodes != 24 {
		t.Errorf("runs %+v", runs)
	}
}

// No name reaches outside the directory: a symlink to a file elsewhere is
// refused, not followed.
func TestSymlinkOutsideIsNotFollowed(t *testing.T) {
	outside := t.TempDir()
	writeRun(t, outside, small)
	dir := t.TempDir()
	for _, name := range []string{output.TrajectoriesFile, output.MetricsFile, output.SummaryFile} {
		if err := os.Symlink(filepath.Join(outside, name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	d, err := Open(dir)
	if err == nil {
		defer d.Close()
		if runs := d.Runs(); len(runs) != 0 {
			t.Fatalf("read through symlinks: %+v", runs)
		}
	}
	if err == nil || !strings.Contains(err.Error(), "escapes") && !strings.Contains(err.Error(), "outside") {
		t.Errorf("error %v: want one about the path escaping the directory", err)
	}
}

func TestSearch(t *testing.T) {
	dir := t.TempDir()
	writeRun(t, dir, small)
	d := open(t, dir)
	eps := ByOffset(d.Episodes(NewFilter("run-a")))
	for _, tc := range []struct {
		q     string
		min   int
		where string
		in    string
	}{
		{"<SCRIPT>document.title", 3, "content", "<script>document.title"}, // the hostile episode of each step
		{"connection reset", 0, "error", "connection reset"},
		{"role", 0, "", ""},      // a key, never matched
		{"assistant", 0, "", ""}, // a role's value is not searched
		{"python3 -m pytest", 24, "arguments", "python3 -m pytest"},
	} {
		hits, next, err := d.Search(context.Background(), eps, tc.q, 100)
		if err != nil || next != len(eps) {
			t.Fatalf("%q: next %d, err %v", tc.q, next, err)
		}
		if len(hits) < tc.min || tc.where == "" && len(hits) > 0 {
			t.Errorf("%q: %d hits", tc.q, len(hits))
		}
		for _, h := range hits {
			if h.Where != tc.where && tc.where != "error" || !strings.Contains(strings.ToLower(h.Snippet), strings.ToLower(tc.in)) {
				t.Errorf("%q: hit %s in %s: %q", tc.q, h.Episode.Key(), h.Where, h.Snippet)
			}
		}
	}
	hits, next, _ := d.Search(context.Background(), eps, "python3 -m pytest", 5)
	if len(hits) != 5 || next != 5 {
		t.Errorf("a limit of 5: %d hits, next %d", len(hits), next)
	}
	more, _, _ := d.Search(context.Background(), eps[next:], "python3 -m pytest", 5)
	if len(more) != 5 || more[0].Episode == hits[4].Episode {
		t.Errorf("continuing: %d hits", len(more))
	}
}

func TestSettings(t *testing.T) {
	dir := t.TempDir()
	writeRun(t, dir, small)
	for _, p := range []string{"checkpoints/step-000010/model", "checkpoints/step-000020/model"} {
		os.MkdirAll(filepath.Join(dir, p), 0o755)
	}
	os.WriteFile(filepath.Join(dir, "checkpoints/step-000010/trainer_state.json"), []byte(`{"config":{"learning_rate":1}}`), 0o644)
	os.WriteFile(filepath.Join(dir, "checkpoints/step-000020/trainer_state.json"), []byte(`{"format":1,"config":{"learning_rate":0.002}}`), 0o644)
	os.WriteFile(filepath.Join(dir, "checkpoints/step-000020/model/config.json"), []byte(`{"hidden_size":64}`), 0o644)
	d := open(t, dir)
	files, err := d.Settings()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.Name)
	}
	want := []string{"checkpoints/step-000020/trainer_state.json", "checkpoints/step-000020/model/config.json"}
	if !slices.Equal(names, want) || !bytes.Contains(files[0].JSON, []byte(`"learning_rate": 0.002`)) || bytes.Contains(files[0].JSON, []byte("format")) {
		t.Errorf("settings %s", files)
	}
}

// The parallel first index finds what one reader finds.
func TestParallelIndexMatchesSequential(t *testing.T) {
	dir := t.TempDir()
	writeRun(t, dir, small)
	f, err := os.Open(filepath.Join(dir, output.TrajectoriesFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	one, end1, err1 := indexRange(f, 0, st.Size(), 1)
	for _, w := range []int{2, 3, 7, 100} {
		many, end, err := indexRange(f, 0, st.Size(), w)
		if err != nil || err1 != nil || end != end1 || !slices.Equal(many, one) {
			t.Errorf("%d workers: %d lines to %d (%v); one reader: %d lines to %d", w, len(many), end, err, len(one), end1)
		}
	}
	if math.Abs(float64(end1-st.Size())) > 0 || len(one) != 24 {
		t.Errorf("one reader: %d lines to %d of %d", len(one), end1, st.Size())
	}
}
