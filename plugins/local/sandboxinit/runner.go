package sandboxinit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rlhost/rlhost/core"
)

// ExecSpec is one command as the runner sees it: everything already merged
// and resolved against the sandbox's defaults.
type ExecSpec struct {
	Argv      []string      `json:"argv"`
	Env       []string      `json:"env"`
	Dir       string        `json:"dir"`
	Stdin     []byte        `json:"stdin,omitempty"`
	Timeout   time.Duration `json:"timeout"`
	MaxOutput int64         `json:"max_output"`
	// Per-process rlimits, applied while the command is stopped at its exec,
	// before its first instruction. Zero = unset (or inherited).
	CPUTime      time.Duration `json:"cpu_time,omitempty"`
	AddressSpace int64         `json:"address_space,omitempty"`
	FileSize     int64         `json:"file_size,omitempty"`
	OpenFiles    int           `json:"open_files,omitempty"`
	Nproc        int           `json:"nproc,omitempty"`
}

// Starter forks and reaps. The none backend forks from any thread and
// waits on the pid; a sandbox init forks from its capability-less spawner
// thread and waits through its PID-1 reaper. A non-nil atExec must run
// while the new process is stopped at its exec (see ForkExecAt).
type Starter interface {
	Start(argv0 string, argv []string, attr *syscall.ProcAttr, atExec func(pid int) error) (int, WaitFunc, error)
}

// WaitFunc blocks until the started process exits.
type WaitFunc func() (syscall.WaitStatus, syscall.Rusage, error)

// LimitCounters reads cumulative cgroup event counters (OOM kills, pids.max
// hits) so a run can tell which sandbox-wide limit fired during it.
type LimitCounters func() (oomKills, pidsMax uint64)

// drainGrace is how long output is still collected after the command exits,
// for background children that inherited its stdout/stderr.
const drainGrace = 50 * time.Millisecond

// drainMax bounds how long the grace is renewed while output is unread.
const drainMax = time.Second

// unread reports whether the pipe holds bytes not yet read. It goes through
// SyscallConn, since Fd would put the file back into blocking mode.
func unread(f *os.File) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.TIOCINQ) }) // FIONREAD
	return n > 0
}

const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// run executes one command to completion and reports which limit fired.
func Run(ctx context.Context, s ExecSpec, st Starter, isolation string, counters LimitCounters) (core.ExecResult, error) {
	res, _, err := RunPgid(ctx, s, st, isolation, counters)
	return res, err
}

// RunPgid is run that also returns the command's process group (0 if it
// never started).
func RunPgid(ctx context.Context, s ExecSpec, st Starter, isolation string, counters LimitCounters) (res core.ExecResult, pgid int, err error) {
	res = core.ExecResult{Isolation: isolation}
	if len(s.Argv) == 0 {
		return res, 0, errors.New("exec: empty command")
	}
	begin := time.Now()
	finish := func() core.ExecResult {
		res.Duration = time.Since(begin)
		res.DurationMS = float64(res.Duration.Microseconds()) / 1000
		return res
	}
	argv0, err := lookPath(s.Argv[0], s.Env, s.Dir)
	if err != nil {
		res.ExitCode = 127
		res.Stderr = fmt.Sprintf("rlhost: %s: %v\n", s.Argv[0], err)
		return finish(), pgid, nil
	}

	// The command's ends stay plain blocking fds (closed once it has
	// them); only ours go on the runtime's poller, so a drain can be cut
	// short by closing it. Cheaper than os.Pipe, which registers and then
	// unregisters the command's ends too. A command given no input reads
	// /dev/null, as it would from exec.Command: one open instead of a
	// pipe whose other end is closed at once.
	var stdinW *os.File
	var stdinR int
	if len(s.Stdin) > 0 {
		stdinW, stdinR, err = pipe(1)
	} else {
		stdinR, err = unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return res, 0, fmt.Errorf("exec: stdin: %w", err)
	}
	closeStdinW := func() {
		if stdinW != nil {
			stdinW.Close()
		}
	}
	outR, outW, err := pipe(0)
	if err != nil {
		closeStdinW()
		unix.Close(stdinR)
		return res, 0, fmt.Errorf("exec: stdout pipe: %w", err)
	}
	errR, errW, err := pipe(0)
	if err != nil {
		closeStdinW()
		unix.Close(stdinR)
		outR.Close()
		unix.Close(outW)
		return res, 0, fmt.Errorf("exec: stderr pipe: %w", err)
	}

	var oom0, pids0 uint64
	if counters != nil {
		oom0, pids0 = counters()
	}
	attr := &syscall.ProcAttr{
		Dir:   s.Dir,
		Env:   s.Env,
		Files: []uintptr{uintptr(stdinR), uintptr(outW), uintptr(errW)},
		// Its own process group, so a timeout can kill the whole tree at once.
		Sys: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	}
	var atExec func(int) error
	if s.CPUTime > 0 || s.AddressSpace > 0 || s.FileSize > 0 || s.OpenFiles > 0 || s.Nproc > 0 {
		atExec = func(pid int) error { return applyRlimits(pid, s) }
	}
	pid, wait, err := st.Start(argv0, s.Argv, attr, atExec)
	pgid = pid
	unix.Close(stdinR)
	unix.Close(outW)
	unix.Close(errW)
	if err != nil {
		closeStdinW()
		outR.Close()
		errR.Close()
		res.ExitCode = 126
		if errors.Is(err, syscall.ENOENT) {
			res.ExitCode = 127
		}
		res.Stderr = fmt.Sprintf("rlhost: %s: %v\n", s.Argv[0], err)
		return finish(), pgid, nil
	}

	stdout := &capBuf{max: s.MaxOutput}
	stderr := &capBuf{max: s.MaxOutput}
	var readers sync.WaitGroup
	readers.Add(2)
	go func() { defer readers.Done(); stdout.drain(outR) }()
	go func() { defer readers.Done(); stderr.drain(errR) }()
	if stdinW != nil {
		go func() {
			stdinW.Write(s.Stdin) // EPIPE when the command ignores stdin is fine
			stdinW.Close()
		}()
	}

	// finished stops a late timer or cancellation from killing the group
	// after the command has ended: its background children are meant to
	// outlive the exec.
	var mu sync.Mutex
	timedOut, finished := false, false
	killGroup := func(timeout bool) {
		mu.Lock()
		defer mu.Unlock()
		if finished {
			return
		}
		if timeout {
			timedOut = true
		}
		syscall.Kill(-pid, syscall.SIGKILL)
		syscall.Kill(pid, syscall.SIGKILL) // in case it left its group already
	}
	var timer *time.Timer
	if s.Timeout > 0 {
		timer = time.AfterFunc(s.Timeout, func() { killGroup(true) })
	}
	stopWatch := context.AfterFunc(ctx, func() { killGroup(false) })

	ws, ru, werr := wait()
	mu.Lock()
	finished = true
	killed := timedOut
	mu.Unlock()
	stopWatch()
	if timer != nil {
		timer.Stop()
	}
	if werr != nil || killed || ctx.Err() != nil {
		// The tree is gone (and reaped) before the result says so. The wait
		// ends as soon as the group is empty; the bound is only for a kernel
		// that cannot reap at all, and must allow for a loaded machine, where
		// reaping a killed tree can take longer than half a second.
		killGroupAndWait(pid, groupGoneLimit)
	}

	drained := make(chan struct{})
	go func() { readers.Wait(); close(drained) }()
	// A loaded machine can leave the readers unscheduled for longer than
	// the grace while the command's own last output still sits in a pipe;
	// closing then would drop it (a verdict printed just before exit, say).
	// So the grace is renewed while either pipe holds unread bytes, up to
	// drainMax; a pipe that stays empty, held open by a background child,
	// is cut as before.
	grace := time.NewTimer(drainGrace)
	drainEnd := time.Now().Add(drainMax)
	for cut := false; !cut; {
		select {
		case <-drained:
			cut = true
		case <-grace.C:
			if (unread(outR) || unread(errR)) && time.Now().Before(drainEnd) {
				grace.Reset(drainGrace)
				continue
			}
			outR.Close()
			errR.Close()
			<-drained
			cut = true
		}
	}
	grace.Stop()
	outR.Close()
	errR.Close()
	if werr != nil {
		return finish(), pgid, fmt.Errorf("exec: wait for pid %d: %w", pid, werr)
	}

	res.Stdout = string(stdout.buf)
	res.Stderr = string(stderr.buf)
	res.OutputTruncated = stdout.truncated || stderr.truncated
	res.TimedOut = killed
	switch {
	case ws.Exited():
		res.ExitCode = ws.ExitStatus()
	case ws.Signaled():
		sig := ws.Signal()
		res.ExitCode = 128 + int(sig)
		res.Signal = unix.SignalName(sig)
		cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		if s.CPUTime > 0 && (sig == syscall.SIGXCPU || (sig == syscall.SIGKILL && cpu >= s.CPUTime)) {
			res.CPUTimeExceeded = true
		}
	}
	if counters != nil {
		oom1, pids1 := counters()
		res.OOMKilled = oom1 > oom0
		res.PidsExceeded = pids1 > pids0
	}
	if ctx.Err() != nil && !res.TimedOut {
		return finish(), pgid, fmt.Errorf("exec: %w", ctx.Err())
	}
	return finish(), pgid, nil
}

func applyRlimits(pid int, s ExecSpec) error {
	var errs []error
	set := func(name string, res int, v uint64, hard uint64) {
		lim := unix.Rlimit{Cur: v, Max: hard}
		if err := unix.Prlimit(pid, res, &lim, nil); err != nil {
			errs = append(errs, fmt.Errorf("set %s: %w", name, err))
		}
	}
	if s.CPUTime > 0 {
		sec := uint64((s.CPUTime + time.Second - 1) / time.Second)
		set("RLIMIT_CPU", unix.RLIMIT_CPU, sec, sec+1)
	}
	if s.AddressSpace > 0 {
		set("RLIMIT_AS", unix.RLIMIT_AS, uint64(s.AddressSpace), uint64(s.AddressSpace))
	}
	if s.FileSize > 0 {
		set("RLIMIT_FSIZE", unix.RLIMIT_FSIZE, uint64(s.FileSize), uint64(s.FileSize))
	}
	if s.OpenFiles > 0 {
		set("RLIMIT_NOFILE", unix.RLIMIT_NOFILE, uint64(s.OpenFiles), uint64(s.OpenFiles))
	}
	if s.Nproc > 0 {
		set("RLIMIT_NPROC", unix.RLIMIT_NPROC, uint64(s.Nproc), uint64(s.Nproc))
	}
	set("RLIMIT_CORE", unix.RLIMIT_CORE, 0, 0)
	return errors.Join(errs...)
}

// ForkExecAt starts a command like syscall.ForkExec. With a non-nil
// atExec, the child asks to be traced (PTRACE_TRACEME), so the kernel
// stops it right after its execve, before the new program's first
// instruction; atExec runs then (setting rlimits, moving it into a
// cgroup), and the child is detached and runs. A child forked by the
// command at once therefore inherits what atExec set: nothing runs in the
// window that prlimit after fork would leave. It must run on a locked OS
// thread (the tracer is the thread that forked). If the child died before
// the stop, its consumed wait status is returned.
//
// Where the kernel refuses PTRACE_TRACEME (Yama's ptrace_scope = 3, some
// LSM policies), atExec runs right after the fork instead, as it did
// before: the only way left, and the window it leaves is documented.
func ForkExecAt(argv0 string, argv []string, attr *syscall.ProcAttr, atExec func(pid int) error) (pid int, died *syscall.WaitStatus, err error) {
	if atExec == nil {
		pid, err = syscall.ForkExec(argv0, argv, attr)
		return pid, nil, err
	}
	a := *attr
	sys := *attr.Sys
	sys.Ptrace = true
	a.Sys = &sys
	pid, err = syscall.ForkExec(argv0, argv, &a)
	if err == syscall.EPERM {
		if pid, err = syscall.ForkExec(argv0, argv, attr); err == nil {
			if err := atExec(pid); err != nil {
				syscall.Kill(pid, syscall.SIGKILL)
				var ws syscall.WaitStatus
				for {
					if _, err := syscall.Wait4(pid, &ws, 0, nil); err != syscall.EINTR {
						break
					}
				}
				return 0, nil, err
			}
			return pid, nil, nil
		}
	}
	if err != nil {
		return 0, nil, err
	}
	var ws syscall.WaitStatus
	for {
		_, err = syscall.Wait4(pid, &ws, unix.WALL, nil)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		syscall.Kill(pid, syscall.SIGKILL)
		return pid, nil, fmt.Errorf("wait for the exec stop of pid %d: %w", pid, err)
	}
	if !ws.Stopped() {
		return pid, &ws, nil
	}
	aerr := atExec(pid)
	if aerr != nil {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	if err := syscall.PtraceDetach(pid); err != nil && aerr == nil {
		syscall.Kill(pid, syscall.SIGKILL)
		aerr = fmt.Errorf("detach pid %d: %w", pid, err)
	}
	if aerr != nil {
		// Reap it here: the caller gets no pid to wait on.
		for {
			if _, err := syscall.Wait4(pid, &ws, unix.WALL, nil); err != syscall.EINTR {
				break
			}
		}
		return 0, nil, aerr
	}
	return pid, nil, nil
}

// pipe makes a close-on-exec pipe and returns our end (0: the read end,
// 1: the write end) as a non-blocking *os.File on the runtime's poller,
// and the other end as a raw blocking fd for the command.
func pipe(ours int) (*os.File, int, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, -1, err
	}
	// F_SETFL replaces the status flags; a new pipe end has none but its
	// access mode, which F_SETFL ignores. (One call, not SetNonblock's two.)
	if _, err := unix.FcntlInt(uintptr(p[ours]), unix.F_SETFL, unix.O_NONBLOCK); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return nil, -1, err
	}
	return os.NewFile(uintptr(p[ours]), "pipe"), p[1-ours], nil
}

// capBuf keeps the first max bytes written and counts the rest, so a
// flooding writer never blocks on a full pipe.
type capBuf struct {
	max       int64
	buf       []byte
	truncated bool
}

func (c *capBuf) drain(f *os.File) {
	chunk := make([]byte, 64<<10)
	for {
		n, err := f.Read(chunk)
		if n > 0 {
			room := c.max - int64(len(c.buf))
			switch {
			case room >= int64(n):
				c.buf = append(c.buf, chunk[:n]...)
			case room > 0:
				c.buf = append(c.buf, chunk[:room]...)
				c.truncated = true
			default:
				c.truncated = true
			}
		}
		if err != nil {
			return
		}
	}
}

// lookPath finds argv0 in the PATH of env (not the caller's PATH: the
// command runs in the sandbox's environment and file system).
func lookPath(file string, env []string, dir string) (string, error) {
	if strings.Contains(file, "/") {
		return file, nil
	}
	pathVar := DefaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathVar = v
		}
	}
	for _, d := range strings.Split(pathVar, ":") {
		if d == "" {
			d = "."
		}
		p := d + "/" + file
		if !strings.HasPrefix(p, "/") {
			p = dir + "/" + p
		}
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Mode&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("command not found")
}

// DirectStarter forks from whatever thread runs it and waits on the pid;
// used where no PID-1 reaper owns the children (isolation = "none").
type DirectStarter struct{}

func (DirectStarter) Start(argv0 string, argv []string, attr *syscall.ProcAttr, atExec func(pid int) error) (int, WaitFunc, error) {
	// The exec stop must be handled by the thread that forked.
	runtime.LockOSThread()
	pid, died, err := ForkExecAt(argv0, argv, attr, atExec)
	runtime.UnlockOSThread()
	if err != nil {
		return 0, nil, err
	}
	return pid, func() (syscall.WaitStatus, syscall.Rusage, error) {
		var ws syscall.WaitStatus
		var ru syscall.Rusage
		if died != nil {
			return *died, ru, nil
		}
		for {
			_, err := syscall.Wait4(pid, &ws, 0, &ru)
			if err == syscall.EINTR {
				continue
			}
			return ws, ru, err
		}
	}, nil
}

// groupGoneLimit bounds waiting for a killed process group to be reaped.
const groupGoneLimit = 5 * time.Second

// killGroupAndWait kills a process group until no member is left (members
// stay in it until reaped), so its pids are free and no part of the tree
// runs on. It gives up after limit.
func killGroupAndWait(pgid int, limit time.Duration) {
	if pgid <= 1 {
		return
	}
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(-pgid, syscall.SIGKILL); err == syscall.ESRCH {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
