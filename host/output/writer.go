package output

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/rlhost/rlhost/core"
)

// File names inside a run's output directory.
const (
	TrajectoriesFile = "trajectories.jsonl"
	MetricsFile      = "metrics.jsonl"
	SummaryFile      = "summary.json"
)

// Writer appends a run's trajectories and step metrics and keeps its summary
// current. All methods are safe for concurrent use.
type Writer struct {
	dir       string
	traj      *jsonlFile
	metrics   *jsonlFile
	recovered []Recovery
	summaryMu sync.Mutex // serialises summary rewrites so renames land in call order

	observeMu sync.Mutex
	observe   func(core.Trajectory)
}

// OnTrajectory makes every trajectory written from now on also go to f
// (e.g. Progress.EpisodeFinished), after it is on its way to disk. f must
// be safe for concurrent use.
func (w *Writer) OnTrajectory(f func(core.Trajectory)) {
	w.observeMu.Lock()
	defer w.observeMu.Unlock()
	w.observe = f
}

// Open creates dir if needed and opens its JSONL files for appending. A
// partial last line left by a crash is cut off; Recovered says which.
func Open(dir string) (*Writer, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create output dir %s: %w", dir, err)
	}
	w := &Writer{dir: dir}
	var rec *Recovery
	var err error
	if w.traj, rec, err = openJSONL(filepath.Join(dir, TrajectoriesFile)); err != nil {
		return nil, err
	}
	if rec != nil {
		w.recovered = append(w.recovered, *rec)
	}
	if w.metrics, rec, err = openJSONL(filepath.Join(dir, MetricsFile)); err != nil {
		w.traj.close()
		return nil, err
	}
	if rec != nil {
		w.recovered = append(w.recovered, *rec)
	}
	return w, nil
}

// Dir is the output directory.
func (w *Writer) Dir() string { return w.dir }

// Recovered lists the torn lines cut off by Open; the caller should tell the
// user, since the episode or step on that line is lost.
func (w *Writer) Recovered() []Recovery { return append([]Recovery(nil), w.recovered...) }

// WriteTrajectory appends one finished episode. It is not fsynced on its own;
// WriteStep makes the step's batch durable.
func (w *Writer) WriteTrajectory(t core.Trajectory) error {
	if err := w.traj.append(t); err != nil {
		return err
	}
	w.observeMu.Lock()
	f := w.observe
	w.observeMu.Unlock()
	if f != nil {
		f(t)
	}
	return nil
}

// WriteStep makes the step's trajectories durable, then appends and fsyncs
// its metrics line, so a metrics line on disk implies its episodes are too.
func (w *Writer) WriteStep(m core.StepMetrics) error {
	if err := w.traj.sync(); err != nil {
		return err
	}
	if err := w.metrics.append(m); err != nil {
		return err
	}
	return w.metrics.sync()
}

// WriteSummary replaces summary.json atomically: readers see the old or the
// new file, never a torn one.
func (w *Writer) WriteSummary(s Summary) error {
	if s.OutputDir == "" {
		s.OutputDir = w.dir
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("encode summary: %w", err)
	}
	data = append(data, '\n')
	w.summaryMu.Lock()
	defer w.summaryMu.Unlock()
	return writeFileAtomic(filepath.Join(w.dir, SummaryFile), data)
}

// Close syncs and closes both JSONL files.
func (w *Writer) Close() error {
	return errors.Join(w.traj.close(), w.metrics.close())
}

// writeFileAtomic writes data to a temporary file beside path, fsyncs it and
// renames it over path, then fsyncs the directory so the rename survives a
// power loss.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("create temp for %s: %w", path, err)
	}
	tmpName := tmp.Name()
	cleanup := func() { os.Remove(tmpName) }
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		cleanup()
		return fmt.Errorf("write temp for %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		cleanup()
		return fmt.Errorf("sync temp for %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		cleanup()
		return fmt.Errorf("close temp for %s: %w", path, err)
	}
	if err := os.Chmod(tmpName, 0o644); err != nil {
		cleanup()
		return fmt.Errorf("chmod temp for %s: %w", path, err)
	}
	if err := os.Rename(tmpName, path); err != nil {
		cleanup()
		return fmt.Errorf("replace %s: %w", path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open dir of %s: %w", path, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync dir of %s: %w", path, err)
	}
	return nil
}
