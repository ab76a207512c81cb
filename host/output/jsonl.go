package output

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// Recovery reports a torn last line cut off when a JSONL file was reopened,
// the trace a crash leaves behind mid-write.
type Recovery struct {
	File         string
	DroppedBytes int64
}

func (r Recovery) String() string {
	return fmt.Sprintf("%s: dropped a partial last line of %d bytes left by an earlier crash", r.File, r.DroppedBytes)
}

// jsonlFile is one append-only JSONL file shared by the goroutines of a run.
type jsonlFile struct {
	mu   sync.Mutex
	path string
	f    *os.File
}

// openJSONL opens path for appending, first cutting off any partial last
// line. rec is non-nil when bytes were dropped.
func openJSONL(path string) (*jsonlFile, *Recovery, error) {
	rec, err := repairTail(path)
	if err != nil {
		return nil, nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", path, err)
	}
	return &jsonlFile{path: path, f: f}, rec, nil
}

// append marshals v and writes it plus '\n' in a single write call, so that a
// crash leaves at most one partial line, at the end, and concurrent appends
// never interleave.
func (j *jsonlFile) append(v any) error {
	line, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode line for %s: %w", j.path, err)
	}
	line = append(line, '\n')
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return fmt.Errorf("write %s: %w", j.path, os.ErrClosed)
	}
	if _, err := j.f.Write(line); err != nil {
		return fmt.Errorf("write %s: %w", j.path, err)
	}
	return nil
}

func (j *jsonlFile) sync() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return fmt.Errorf("sync %s: %w", j.path, os.ErrClosed)
	}
	if err := j.f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", j.path, err)
	}
	return nil
}

func (j *jsonlFile) close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	syncErr := j.f.Sync()
	closeErr := j.f.Close()
	j.f = nil
	if err := errors.Join(syncErr, closeErr); err != nil {
		return fmt.Errorf("close %s: %w", j.path, err)
	}
	return nil
}

// tailChunk is how much repairTail reads per step backwards; trajectories
// can be megabytes long, so the file is never read whole.
const tailChunk = 64 << 10

// repairTail truncates path back to just after its last '\n' when it does not
// end with one. A missing or empty file needs nothing.
func repairTail(path string) (*Recovery, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open %s for tail check: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	size := st.Size()
	if size == 0 {
		return nil, nil
	}
	keep, err := lastLineEnd(f, size)
	if err != nil {
		return nil, fmt.Errorf("scan tail of %s: %w", path, err)
	}
	if keep == size {
		return nil, nil
	}
	if err := f.Truncate(keep); err != nil {
		return nil, fmt.Errorf("truncate partial line of %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("sync %s after truncate: %w", path, err)
	}
	return &Recovery{File: path, DroppedBytes: size - keep}, nil
}

// lastLineEnd returns the offset just past the last '\n' in the first size
// bytes of r, or 0 when there is none.
func lastLineEnd(r io.ReaderAt, size int64) (int64, error) {
	buf := make([]byte, tailChunk)
	end := size
	for end > 0 {
		start := max(end-tailChunk, 0)
		chunk := buf[:end-start]
		if _, err := r.ReadAt(chunk, start); err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		if i := bytes.LastIndexByte(chunk, '\n'); i >= 0 {
			return start + int64(i) + 1, nil
		}
		end = start
	}
	return 0, nil
}
