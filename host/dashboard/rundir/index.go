package rundir

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/host/output"
)

// Episode is one line of trajectories.jsonl as the index holds it: where
// the line is, and what a listing or a filter needs without reading it.
type Episode struct {
	Off int64 // of the line in trajectories.jsonl
	Len int32 // of the line, without its '\n'

	Run                int32 // Dir.runs index
	Step, Group, Index int32
	Task, Finish       int32 // Dir.strs indexes
	Turns              int32
	PromptTokens       int32
	CompletionTokens   int32
	Reward             float64
	DurationMS         float32
	Execs              float32 // sandbox execs
	Flags              uint8
}

// Episode flags.
const (
	Errored    uint8 = 1 << iota // the trajectory has an error
	TimedOut                     // output.TimedOut
	Passed                       // output.Passed
	Superseded                   // a later line holds the same episode (a resumed step)
)

// Is reports whether every flag in f is set.
func (e Episode) Is(f uint8) bool { return e.Flags&f == f }

// Key names the episode in URLs and in the sandbox labels the runner sets.
func (e Episode) Key() string { return fmt.Sprintf("s%d-g%d-e%d", e.Step, e.Group, e.Index) }

type epKey struct{ run, step, group, index int32 }

// chunk is how much of trajectories.jsonl one read takes; a longer line
// grows the buffer.
const chunk = 4 << 20

// parallelFrom is the backlog from which the first indexing splits the
// file between cores; below it one reader is faster.
const parallelFrom = 64 << 20

// tracker follows trajectories.jsonl: which file it indexed (a rewritten
// file is a new inode or a shorter one) and how far. Only the refresher
// touches it.
type tracker struct {
	info os.FileInfo // of the file indexed so far; nil: none yet
	end  int64       // offset just past the last complete line indexed
}

// indexLines scans [from, to) of f, which starts at a line boundary, and
// returns the fields of each complete line and the offset after the last
// one; a partial last line is left for the next call.
func indexLines(f io.ReaderAt, from, to int64) ([]scanned, int64, error) {
	var out []scanned
	buf := make([]byte, min(chunk, max(to-from, 1)))
	pos := from // file offset of buf[0]
	have := 0   // bytes of buf filled
	for {
		want := min(int64(len(buf)-have), to-(pos+int64(have)))
		if want > 0 {
			n, err := f.ReadAt(buf[have:have+int(want)], pos+int64(have))
			have += n
			if err != nil && !errors.Is(err, io.EOF) {
				return out, pos, fmt.Errorf("read %s: %w", output.TrajectoriesFile, err)
			}
			if n == 0 {
				return out, pos, nil // the file shrank under us; the next refresh sees it
			}
		}
		start := 0
		for {
			nl := bytes.IndexByte(buf[start:have], '\n')
			if nl < 0 {
				break
			}
			line := buf[start : start+nl]
			if len(bytes.TrimSpace(line)) > 0 {
				fl, err := scanLine(line)
				out = append(out, scanned{off: pos + int64(start), len: int32(nl), fields: fl, bad: err != nil})
			}
			start += nl + 1
		}
		pos += int64(start)
		copy(buf, buf[start:have])
		have -= start
		if pos+int64(have) >= to {
			return out, pos, nil
		}
		if have == len(buf) {
			buf = append(buf, make([]byte, len(buf))...) // one line longer than the buffer
		}
	}
}

type scanned struct {
	off    int64
	len    int32
	fields lineFields
	bad    bool
}

// workersFor is how many goroutines index a backlog of n bytes.
func workersFor(n int64) int {
	if n < parallelFrom {
		return 1
	}
	return runtime.GOMAXPROCS(0)
}

// indexRange indexes [from, to) of f, split between workers at line
// boundaries.
func indexRange(f io.ReaderAt, from, to int64, workers int) ([]scanned, int64, error) {
	if workers < 2 {
		return indexLines(f, from, to)
	}
	cuts := []int64{from}
	for k := 1; k < workers; k++ {
		at, err := nextLineStart(f, from+(to-from)*int64(k)/int64(workers), to)
		if err != nil {
			return nil, from, err
		}
		if at > cuts[len(cuts)-1] && at < to {
			cuts = append(cuts, at)
		}
	}
	cuts = append(cuts, to)
	parts := make([][]scanned, len(cuts)-1)
	ends := make([]int64, len(cuts)-1)
	errs := make([]error, len(cuts)-1)
	var wg sync.WaitGroup
	for k := range parts {
		wg.Go(func() { parts[k], ends[k], errs[k] = indexLines(f, cuts[k], cuts[k+1]) })
	}
	wg.Wait()
	var out []scanned
	end := from
	for k := range parts {
		if errs[k] != nil {
			return out, end, errs[k]
		}
		out = append(out, parts[k]...)
		end = ends[k]
		if k+1 < len(parts) && end != cuts[k+1] {
			break // a part stopped short (the file changed): the rest waits
		}
	}
	return out, end, nil
}

// nextLineStart returns the offset just past the first '\n' at or after
// at, or to when there is none before it.
func nextLineStart(f io.ReaderAt, at, to int64) (int64, error) {
	buf := make([]byte, 64<<10)
	for at < to {
		n, err := f.ReadAt(buf[:min(int64(len(buf)), to-at)], at)
		if i := bytes.IndexByte(buf[:n], '\n'); i >= 0 {
			return at + int64(i) + 1, nil
		}
		at += int64(n)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		if n == 0 {
			break
		}
	}
	return to, nil
}

// flagsOf applies the output package's own rules, so the dashboard counts
// passes and timeouts as the run's metrics do.
func flagsOf(f lineFields) uint8 {
	t := core.Trajectory{Reward: f.reward, FinishReason: f.finish, Metrics: map[string]float64{}}
	if f.passed != 0 {
		t.Metrics["passed"] = f.passed
	}
	if f.timeouts != 0 {
		t.Metrics["timeouts"] = f.timeouts
	}
	if f.execTimeouts != 0 {
		t.Metrics[output.SandboxTimeouts] = f.execTimeouts
	}
	var fl uint8
	if f.errored {
		fl |= Errored
	}
	if output.TimedOut(t) {
		fl |= TimedOut
	}
	if output.Passed(t) {
		fl |= Passed
	}
	return fl
}
