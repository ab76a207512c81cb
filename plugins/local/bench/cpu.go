package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// cpuMeter counts the CPU time of this process and all its descendants
// through a cgroup v2 of their own: cpu.stat's usage_usec is hierarchical
// and includes exited processes, so sandbox inits, launchers, bwrap and
// interpreters are all counted, wherever their v1 controllers put them.
// Work the kernel defers to its own threads (network namespace clean-up,
// for one) is not counted, for the baseline and the backend alike.
type cpuMeter struct {
	dir  string
	home string // the cgroup this process came from, to go back to
}

func newCPUMeter() (*cpuMeter, error) {
	mount, rel, err := ownV2Cgroup()
	if err != nil {
		return nil, err
	}
	home := filepath.Join(mount, rel)
	dir := filepath.Join(home, fmt.Sprintf("rlhost-bench-cpu-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cgroup for CPU accounting: %w", err)
	}
	m := &cpuMeter{dir: dir, home: home}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
		os.Remove(dir)
		return nil, fmt.Errorf("cgroup for CPU accounting: move this process: %w", err)
	}
	return m, nil
}

// ownV2Cgroup finds the cgroup v2 mount (unified or hybrid) and this
// process's path in it.
func ownV2Cgroup() (mount, rel string, err error) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", "", err
	}
	for _, line := range strings.Split(string(mi), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if f := strings.Fields(pre); ok && len(f) >= 5 && strings.HasPrefix(post, "cgroup2 ") {
			mount = f[4]
			break
		}
	}
	if mount == "" {
		return "", "", errors.New("no cgroup v2 hierarchy is mounted: CPU figures need one (a hybrid 'unified' mount will do)")
	}
	pc, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", "", err
	}
	for _, l := range strings.Split(string(pc), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			return mount, p, nil
		}
	}
	return "", "", errors.New("this process has no cgroup v2 path in /proc/self/cgroup")
}

func (m *cpuMeter) usage() (int64, error) {
	b, err := os.ReadFile(filepath.Join(m.dir, "cpu.stat"))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("cpu.stat has no usage_usec")
}

// close moves this process back and removes the cgroup; every descendant
// has exited by then.
func (m *cpuMeter) close() {
	os.WriteFile(filepath.Join(m.home, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0)
	os.Remove(m.dir)
}

// cpuPer runs f n times and returns the CPU milliseconds each run cost.
func (m *cpuMeter) cpuPer(n int, f func() error) (float64, error) {
	u0, err := m.usage()
	if err != nil {
		return 0, err
	}
	for i := 0; i < n; i++ {
		if err := f(); err != nil {
			return 0, err
		}
	}
	u1, err := m.usage()
	if err != nil {
		return 0, err
	}
	return float64(u1-u0) / 1000 / float64(n), nil
}

// runCPU measures what a sandbox costs in CPU rather than latency: one
// create → exec of true → destroy, against one `bwrap --unshare-all true`
// and one `python3 -c pass` (a scored completion starts one interpreter, so
// this says how far a fresh sandbox per completion can go). Rounds of n of
// each take turns; the median round is printed.
func runCPU(n int, stateDir, helper string) error {
	ctx := context.Background()
	meter, err := newCPUMeter()
	if err != nil {
		return err
	}
	defer meter.close()
	b, err := newBackend(ctx, stateDir, helper, map[string]any{})
	if err != nil {
		return fmt.Errorf("configure: %w", err)
	}
	defer b.Shutdown(ctx)
	truePath, err := lookDefaultPath("true")
	if err != nil {
		return err
	}
	python, err := lookDefaultPath("python3")
	if err != nil {
		return err
	}
	lifecycle := func() error {
		id, err := createAndRunTrue(ctx, b)
		if id != "" {
			if derr := b.Destroy(ctx, id); err == nil {
				err = derr
			}
		}
		return err
	}
	bwrapRun := bare("bwrap", "--unshare-all", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", truePath)
	pyRun := bare(python, "-c", "pass")
	const rounds = 5
	var bw, sb, py []float64
	for r := 0; r < rounds; r++ {
		for _, c := range []struct {
			into *[]float64
			f    func() error
		}{{&bw, bwrapRun}, {&sb, lifecycle}, {&py, pyRun}} {
			v, err := meter.cpuPer(n, c.f)
			if err != nil {
				return err
			}
			*c.into = append(*c.into, v)
		}
	}
	mb, ms, mp := median(bw), median(sb), median(py)
	m := machine()
	fmt.Println("| machine | benchmark | baseline (same run, interleaved) | local backend | ratio |")
	fmt.Println("|---|---|---|---|---|")
	fmt.Printf("| %s | CPU of create → exec of true → destroy | bwrap --unshare-all true: %.2f ms | %.2f ms | %.2fx bwrap |\n", m, mb, ms, ms/mb)
	fmt.Printf("| %s | CPU of create → exec of true → destroy | %s -c pass: %.2f ms | %.2f ms | %.2fx one interpreter start |\n", m, python, mp, ms, ms/mp)
	fmt.Printf("Note: CPU ms per run, median of %d rounds of %d runs each, counted in a cgroup v2 holding this process and its descendants.\n", rounds, n)
	return nil
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}
