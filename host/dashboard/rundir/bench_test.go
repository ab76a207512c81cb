package rundir

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/host/dashboard/fakerun"
	"github.com/rlhost/rlhost/host/output"
)

// bigRun is the run the benchmark opens: 100,000 episodes of three tool
// turns each, about 1 GB of trajectories.
var bigRun = fakerun.Options{RunID: "big", Steps: 125, Groups: 100, GroupSize: 8, Turns: 3, ToolOutput: 1000, TokenIDs: 12, Seed: 1}

// bigRunDir writes bigRun once into RLHOST_BENCH_RUNDIR (kept between
// runs while developing) or a temporary directory.
func bigRunDir(b *testing.B) string {
	b.Helper()
	dir := os.Getenv("RLHOST_BENCH_RUNDIR")
	if dir == "" {
		dir = filepath.Join(b.TempDir(), "run")
	}
	if st, err := os.Stat(filepath.Join(dir, output.SummaryFile)); err == nil && st.Size() > 0 {
		return dir
	}
	start := time.Now()
	if _, err := fakerun.Write(dir, bigRun); err != nil {
		b.Fatal(err)
	}
	b.Logf("wrote %s in %s", dir, time.Since(start).Round(time.Second))
	return dir
}

// BenchmarkLargeRun measures what the dashboard does with a large run
// against the cost of reading the file once and of decoding every line.
// Each round times every figure once, in turn, and the table gives the
// medians.
func BenchmarkLargeRun(b *testing.B) {
	dir := bigRunDir(b)
	path := filepath.Join(dir, output.TrajectoriesFile)
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	var (
		readAll, open, refresh, page, list, searchNone, searchSome []time.Duration
		heap                                                       uint64
		episodes, hits                                             int
	)
	timed := func(dst *[]time.Duration, f func()) {
		t := time.Now()
		f()
		*dst = append(*dst, time.Since(t))
	}
	rounds := 3 // run with -benchtime 1x: the rounds are here
	for range rounds {
		timed(&readAll, func() { readFile(b, path) })
		var d *Dir
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		timed(&open, func() {
			if d, err = Open(dir); err != nil {
				b.Fatal(err)
			}
		})
		runtime.GC()
		runtime.ReadMemStats(&after)
		heap = after.HeapAlloc - min(after.HeapAlloc, before.HeapAlloc)
		timed(&refresh, func() {
			if _, err := d.Refresh(); err != nil {
				b.Fatal(err)
			}
		})
		var all []Episode
		timed(&list, func() { all = d.Episodes(NewFilter(bigRun.RunID)) })
		episodes = len(all)
		timed(&page, func() {
			// Page 1000 of 50: the view reads only the episodes shown.
			for _, e := range all[50000:50050] {
				if _, err := d.Trajectory(e); err != nil {
					b.Fatal(err)
				}
			}
		})
		byOff := ByOffset(all)
		timed(&searchNone, func() {
			h, _, err := d.Search(context.Background(), byOff, "no such text anywhere", 50)
			if err != nil || len(h) != 0 {
				b.Fatal(h, err)
			}
		})
		timed(&searchSome, func() {
			h, _, err := d.Search(context.Background(), byOff, "connection reset", 50)
			if err != nil {
				b.Fatal(err)
			}
			hits = len(h)
		})
		d.Close()
	}
	var decodeAll time.Duration
	if os.Getenv("RLHOST_BENCH_DECODE") != "0" {
		// Decoding every line is what indexing by byte offsets avoids;
		// it is slow, so it runs once.
		t := time.Now()
		if n := decodeFile(b, path); n != episodes {
			b.Fatalf("decoded %d episodes, indexed %d", n, episodes)
		}
		decodeAll = time.Since(t)
	}
	med := func(v []time.Duration) time.Duration { slices.Sort(v); return v[len(v)/2] }
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d.Microseconds())/1000) }
	fmt.Println("| figure | value |")
	fmt.Println("|---|---|")
	fmt.Printf("| trajectories.jsonl | %d episodes, %.2f GB (%d steps) |\n", episodes, float64(st.Size())/1e9, bigRun.Steps)
	fmt.Printf("| baseline: read the file once, 4 MiB reads (ms) | %s |\n", ms(med(readAll)))
	if decodeAll > 0 {
		fmt.Printf("| baseline: decode every line with encoding/json, once (ms) | %s |\n", ms(decodeAll))
	}
	fmt.Printf("| open: index by byte offsets, %d cores (ms) | %s |\n", runtime.GOMAXPROCS(0), ms(med(open)))
	fmt.Printf("| open against reading the file once | %.2fx |\n", float64(med(open))/float64(med(readAll)))
	fmt.Printf("| index held in memory | %.1f MB (%.1f%% of the file) |\n", float64(heap)/1e6, 100*float64(heap)/float64(st.Size()))
	fmt.Printf("| refresh with nothing new (ms) | %.2f |\n", float64(med(refresh).Microseconds())/1000)
	fmt.Printf("| list every episode, sorted (ms) | %s |\n", ms(med(list)))
	fmt.Printf("| read and decode page 1000 (50 episodes) (ms) | %s |\n", ms(med(page)))
	fmt.Printf("| search every episode, no match (ms) | %s |\n", ms(med(searchNone)))
	fmt.Printf("| search until the first 50 matches (%d found) (ms) | %s |\n", hits, ms(med(searchSome)))
	b.ReportMetric(float64(med(open).Milliseconds()), "open-ms")
}

func readFile(b *testing.B, path string) {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, chunk)
	for {
		_, err := f.Read(buf)
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

func decodeFile(b *testing.B, path string) int {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	n := 0
	for sc.Scan() {
		var t core.Trajectory
		if err := json.Unmarshal(sc.Bytes(), &t); err != nil {
			b.Fatal(err)
		}
		if !math.IsNaN(t.Reward) {
			n++
		}
	}
	return n
}
