package local

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rlhost/rlhost/core"
)

type cgroupKind int

const (
	cgroupOff cgroupKind = iota
	cgroupV1
	cgroupV2
)

func (k cgroupKind) String() string {
	return [...]string{"off", "v1", "v2"}[k]
}

// cgroupRoot is where this process may create per-sandbox cgroups: below
// its own cgroup, in the v2 hierarchy or in each needed v1 hierarchy.
type cgroupRoot struct {
	kind   cgroupKind
	v2Base string
	v1Base map[string]string // controller -> directory; "memory" and "pids" always, "cpu" if mounted
}

type cgMount struct {
	dir   string
	ctrls []string // v1 controllers of the mount; nil for v2
}

// readCgroupMounts lists cgroup mounts from mountinfo, and this process's
// path in each hierarchy from /proc/self/cgroup.
func readCgroupMounts() (mounts []cgMount, v2 string, paths map[string]string, err error) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, "", nil, fmt.Errorf("read mountinfo: %w", err)
	}
	for _, line := range strings.Split(string(mi), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 {
			continue
		}
		switch g[0] {
		case "cgroup2":
			if v2 == "" {
				v2 = unescapeMount(f[4])
			}
		case "cgroup":
			var ctrls []string
			for _, o := range strings.Split(g[2], ",") {
				switch o {
				case "memory", "pids", "cpu":
					ctrls = append(ctrls, o)
				}
			}
			if len(ctrls) > 0 {
				mounts = append(mounts, cgMount{dir: unescapeMount(f[4]), ctrls: ctrls})
			}
		}
	}
	paths = map[string]string{}
	pc, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, "", nil, fmt.Errorf("read /proc/self/cgroup: %w", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(pc)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			paths[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			paths[c] = parts[2]
		}
	}
	return mounts, v2, paths, nil
}

func unescapeMount(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

// detectCgroups finds usable cgroups for mode ("auto", "v2", "v1", "off").
// The error names the missing kernel feature and the setting to change.
func detectCgroups(mode string) (*cgroupRoot, error) {
	if mode == "off" {
		return &cgroupRoot{kind: cgroupOff}, nil
	}
	mounts, v2mnt, paths, err := readCgroupMounts()
	if err != nil {
		return nil, err
	}
	var why []string
	if mode == "auto" || mode == "v2" {
		root, err := tryV2(v2mnt, paths[""])
		if err == nil {
			return root, nil
		}
		why = append(why, err.Error())
	}
	if mode == "auto" || mode == "v1" {
		root, err := tryV1(mounts, paths)
		if err == nil {
			return root, nil
		}
		why = append(why, err.Error())
	}
	return nil, fmt.Errorf("no usable cgroups for sandbox memory and pid limits (%s); "+
		"fix the cgroup setup, or set cgroup = \"off\" in the local sandbox block to fall back to per-process RLIMIT_AS/RLIMIT_NPROC: %w",
		strings.Join(why, "; "), core.ErrUnavailable)
}

func tryV2(mnt, own string) (*cgroupRoot, error) {
	if mnt == "" {
		return nil, errors.New("cgroup v2: not mounted")
	}
	base := filepath.Join(mnt, own)
	ctrls, err := os.ReadFile(filepath.Join(base, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Errorf("cgroup v2: %w", err)
	}
	have := strings.Fields(string(ctrls))
	for _, need := range []string{"memory", "pids"} {
		if !contains(have, need) {
			return nil, fmt.Errorf("cgroup v2 at %s: controller %q not available (controllers: %q)", base, need, strings.TrimSpace(string(ctrls)))
		}
	}
	enable := "+memory +pids"
	if contains(have, "cpu") {
		enable += " +cpu"
	}
	if err := os.WriteFile(filepath.Join(base, "cgroup.subtree_control"), []byte(enable), 0); err != nil {
		if errors.Is(err, syscall.EBUSY) {
			return nil, fmt.Errorf("cgroup v2 at %s holds processes, so it cannot enable controllers for children (run rlhost in its own delegated cgroup, e.g. systemd-run --scope -p Delegate=yes): %w", base, err)
		}
		return nil, fmt.Errorf("cgroup v2 at %s: enable %s: %w", base, enable, err)
	}
	if err := probeMkdir(base); err != nil {
		return nil, fmt.Errorf("cgroup v2: %w", err)
	}
	return &cgroupRoot{kind: cgroupV2, v2Base: base}, nil
}

func tryV1(mounts []cgMount, paths map[string]string) (*cgroupRoot, error) {
	root := &cgroupRoot{kind: cgroupV1, v1Base: map[string]string{}}
	for _, m := range mounts {
		for _, c := range m.ctrls {
			if _, dup := root.v1Base[c]; !dup {
				root.v1Base[c] = filepath.Join(m.dir, paths[c])
			}
		}
	}
	for _, need := range []string{"memory", "pids"} {
		base, ok := root.v1Base[need]
		if !ok {
			return nil, fmt.Errorf("cgroup v1: %q hierarchy not mounted", need)
		}
		if err := probeMkdir(base); err != nil {
			return nil, fmt.Errorf("cgroup v1 %s: %w", need, err)
		}
	}
	if base, ok := root.v1Base["cpu"]; ok && probeMkdir(base) != nil {
		delete(root.v1Base, "cpu")
	}
	return root, nil
}

func probeMkdir(base string) error {
	p := filepath.Join(base, fmt.Sprintf("rlhost-probe-%d", os.Getpid()))
	if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("cannot create a child cgroup in %s: %w", base, err)
	}
	return os.Remove(p)
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// sandboxCgroup is one sandbox's cgroup (one directory per v1 hierarchy).
// Below it, cgroupCmds holds every command and carries the sandbox's
// limits; the init stays outside (in the sandbox cgroup itself, or in
// cgroupInit under v2, whose inner cgroups may hold no processes), so an
// OOM kill or a pid limit inside reaches only the workload. The sandbox
// cgroup bounds both, with an allowance for the init.
type sandboxCgroup struct {
	Kind cgroupKind        `json:"kind"`
	Dirs map[string]string `json:"dirs"` // v2: {"": dir}; v1: controller -> dir

	// The two event files, kept open by the owner: they are read before
	// and after every exec, on its path. Raw fds (-1: absent), read with
	// one pread each and parsed in place, without the allocations and
	// copies of os.File and strings.Split: an exec adds little to a bare
	// fork/exec, and these reads are part of that little.
	mu           sync.Mutex
	opened       bool // and not closed
	closed       bool // by destroy: not to be opened again
	oomFD, pidFD int
}

// The child cgroups of a sandbox cgroup.
const (
	cgroupCmds = "cmds"
	cgroupInit = "init"
)

// create makes the cgroup of sandbox id: lim and pids for its commands.
func (r *cgroupRoot) create(id string, lim core.Limits, pids int) (*sandboxCgroup, error) {
	name := "rlhost-" + id
	cg := &sandboxCgroup{Kind: r.kind, Dirs: map[string]string{}}
	mk := func(key, base string) error {
		d := filepath.Join(base, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("create cgroup %s: %w", d, err)
		}
		cg.Dirs[key] = d
		return nil
	}
	mkChild := func(dir, child string) error {
		if err := os.Mkdir(filepath.Join(dir, child), 0o755); err != nil {
			return fmt.Errorf("create cgroup %s/%s: %w", dir, child, err)
		}
		return nil
	}
	write := func(dir, file, val string) error {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(val), 0); err != nil {
			return fmt.Errorf("cgroup %s/%s = %s: %w", dir, file, val, err)
		}
		return nil
	}
	fail := func(err error) (*sandboxCgroup, error) {
		cg.destroy()
		return nil, err
	}
	mem := strconv.FormatInt(lim.MemoryBytes, 10)
	outerMem := strconv.FormatInt(lim.MemoryBytes+initMemoryAllowance, 10)
	cmdPids, outerPids := strconv.Itoa(pids), strconv.Itoa(pids+1+initThreadAllowance)
	switch r.kind {
	case cgroupV2:
		if err := mk("", r.v2Base); err != nil {
			return fail(err)
		}
		d := cg.Dirs[""]
		for _, kv := range [][2]string{{"memory.max", outerMem}, {"memory.swap.max", "0"}, {"pids.max", outerPids}} {
			if err := write(d, kv[0], kv[1]); err != nil && kv[0] != "memory.swap.max" {
				return fail(err)
			}
		}
		if lim.CPUs > 0 {
			if err := write(d, "cpu.max", fmt.Sprintf("%d 100000", int64(lim.CPUs*100000))); err != nil {
				return fail(err)
			}
		}
		if err := write(d, "cgroup.subtree_control", "+memory +pids"); err != nil {
			return fail(err)
		}
		for _, c := range []string{cgroupInit, cgroupCmds} {
			if err := mkChild(d, c); err != nil {
				return fail(err)
			}
		}
		cmds := filepath.Join(d, cgroupCmds)
		for _, kv := range [][2]string{{"memory.max", mem}, {"memory.swap.max", "0"}, {"pids.max", cmdPids}} {
			if err := write(cmds, kv[0], kv[1]); err != nil && kv[0] != "memory.swap.max" {
				return fail(err)
			}
		}
	case cgroupV1:
		// The init's spawner thread counts in the commands' pids.
		cmdPids = strconv.Itoa(pids + 1)
		for _, c := range []string{"memory", "pids", "cpu"} {
			if c == "cpu" && lim.CPUs <= 0 {
				continue // no quota, no need for a cpu cgroup
			}
			if base, ok := r.v1Base[c]; ok {
				if err := mk(c, base); err != nil {
					return fail(err)
				}
				if c != "cpu" {
					// The quota bounds the whole sandbox, init included.
					if err := mkChild(cg.Dirs[c], cgroupCmds); err != nil {
						return fail(err)
					}
				}
			}
		}
		m, p := cg.Dirs["memory"], cg.Dirs["pids"]
		mc, pc := filepath.Join(m, cgroupCmds), filepath.Join(p, cgroupCmds)
		// Outer limits first: a child's may not exceed its parent's.
		for _, w := range [][3]string{{m, "memory.limit_in_bytes", outerMem}, {mc, "memory.limit_in_bytes", mem},
			{p, "pids.max", outerPids}, {pc, "pids.max", cmdPids}} {
			if err := write(w[0], w[1], w[2]); err != nil {
				return fail(err)
			}
		}
		// Absent without swap accounting; then there is no swap to escape to.
		write(m, "memory.memsw.limit_in_bytes", outerMem)
		write(mc, "memory.memsw.limit_in_bytes", mem)
		if lim.CPUs > 0 {
			d, ok := cg.Dirs["cpu"]
			if !ok {
				return fail(errors.New("limits.cpus: cgroup v1 cpu hierarchy not usable"))
			}
			if err := write(d, "cpu.cfs_period_us", "100000"); err != nil {
				return fail(err)
			}
			if err := write(d, "cpu.cfs_quota_us", strconv.FormatInt(int64(lim.CPUs*100000), 10)); err != nil {
				return fail(err)
			}
		}
	}
	return cg, nil
}

// commandFiles opens the way into the commands' cgroup for the init: the
// tasks files (v1, where the init's spawner thread moves itself, and with
// it every command it forks) or cgroup.procs (v2, where each command is
// moved at its exec stop). Opened here, with the backend's credentials.
func (c *sandboxCgroup) commandFiles() ([]*os.File, error) {
	var paths []string
	switch c.Kind {
	case cgroupV2:
		paths = []string{filepath.Join(c.Dirs[""], cgroupCmds, "cgroup.procs")}
	case cgroupV1:
		for _, ctrl := range []string{"memory", "pids"} {
			paths = append(paths, filepath.Join(c.Dirs[ctrl], cgroupCmds, "tasks"))
		}
	}
	var files []*os.File
	for _, p := range paths {
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, fmt.Errorf("open %s: %w", p, err)
		}
		files = append(files, f)
	}
	return files, nil
}

// forkerFiles opens, for each v1 hierarchy of the sandbox, the tasks file
// of the init's cgroup (join) and of this process's own (home): the
// launcher's forking thread moves itself into the first, forks the init
// there, and goes back.
func (c *sandboxCgroup) forkerFiles(r *cgroupRoot) (join, home []*os.File, err error) {
	closeAll := func() {
		for _, f := range append(join, home...) {
			f.Close()
		}
	}
	ctrls := make([]string, 0, len(c.Dirs))
	for ctrl := range c.Dirs {
		ctrls = append(ctrls, ctrl)
	}
	sort.Strings(ctrls)
	for _, ctrl := range ctrls {
		base, ok := r.v1Base[ctrl]
		if !ok {
			closeAll()
			return nil, nil, fmt.Errorf("cgroup v1 %s: no base directory", ctrl)
		}
		for _, p := range []struct {
			path string
			into *[]*os.File
		}{{filepath.Join(c.Dirs[ctrl], "tasks"), &join}, {filepath.Join(base, "tasks"), &home}} {
			f, err := os.OpenFile(p.path, os.O_WRONLY, 0)
			if err != nil {
				closeAll()
				return nil, nil, fmt.Errorf("open %s: %w", p.path, err)
			}
			*p.into = append(*p.into, f)
		}
	}
	return join, home, nil
}

// guess returns the cgroup a sandbox of this process would have had, for
// reaping entries that crashed before their meta was written.
func (r *cgroupRoot) guess(id string) *sandboxCgroup {
	name := "rlhost-" + id
	switch r.kind {
	case cgroupV2:
		return &sandboxCgroup{Kind: r.kind, Dirs: map[string]string{"": filepath.Join(r.v2Base, name)}}
	case cgroupV1:
		cg := &sandboxCgroup{Kind: r.kind, Dirs: map[string]string{}}
		for c, base := range r.v1Base {
			cg.Dirs[c] = filepath.Join(base, name)
		}
		return cg
	}
	return nil
}

// addProc moves a process (and, for v1, the hierarchies it is in) into the cgroup.
func (c *sandboxCgroup) addProc(pid int) error {
	for _, d := range c.Dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("move pid %d into %s: %w", pid, d, err)
		}
	}
	return nil
}

// counters returns cumulative OOM kills and pids.max hits.
func (c *sandboxCgroup) counters() (oom, pids uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, 0
	}
	if !c.opened || (c.oomFD < 0 && c.pidFD < 0) {
		var oomPath, pidsPath string
		switch c.Kind {
		case cgroupV2:
			cmds := filepath.Join(c.Dirs[""], cgroupCmds)
			oomPath, pidsPath = filepath.Join(cmds, "memory.events"), filepath.Join(cmds, "pids.events")
		case cgroupV1:
			oomPath, pidsPath = filepath.Join(c.Dirs["memory"], cgroupCmds, "memory.oom_control"), filepath.Join(c.Dirs["pids"], cgroupCmds, "pids.events")
		default:
			return 0, 0
		}
		c.oomFD, c.pidFD = openEvents(oomPath), openEvents(pidsPath)
		c.opened = true
	}
	return readKey(c.oomFD, "oom_kill"), readKey(c.pidFD, "max")
}

func openEvents(path string) int {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return fd
}

// readKey reads "key value" lines of a cgroup event file from offset 0
// (each read regenerates the file's contents).
func readKey(fd int, key string) uint64 {
	if fd < 0 {
		return 0
	}
	var buf [512]byte
	n, err := unix.Pread(fd, buf[:], 0)
	if err != nil || n <= 0 {
		return 0
	}
	return keyValue(buf[:n], key)
}

// keyValue finds the line "key value" in b and parses its value; 0 when
// there is none.
func keyValue(b []byte, key string) uint64 {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if len(line) > len(key) && line[len(key)] == ' ' && string(line[:len(key)]) == key {
			v, _ := strconv.ParseUint(string(bytes.TrimSpace(line[len(key)+1:])), 10, 64)
			return v // the largest value on overflow, 0 if it is no number
		}
	}
	return 0
}

func (c *sandboxCgroup) closeFiles() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if !c.opened {
		return
	}
	for _, fd := range []int{c.oomFD, c.pidFD} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	c.opened, c.oomFD, c.pidFD = false, -1, -1
}

// destroy kills every process left in the cgroup and removes it, its
// child cgroups first.
func (c *sandboxCgroup) destroy() error {
	if c == nil {
		return nil
	}
	c.closeFiles()
	var errs []error
	for _, top := range c.Dirs {
		if _, err := os.Stat(top); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if c.Kind == cgroupV2 {
			os.WriteFile(filepath.Join(top, "cgroup.kill"), []byte("1"), 0)
		}
		for _, d := range []string{filepath.Join(top, cgroupCmds), filepath.Join(top, cgroupInit), top} {
			if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
				continue
			}
			var err error
			for try := 0; try < 200; try++ {
				killProcs(d)
				if err = os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
					err = nil
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

func killProcs(dir string) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
