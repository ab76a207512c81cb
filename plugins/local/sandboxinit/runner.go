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
	Argv      []string
	Env       []string
	Dir       string
	Stdin     []byte
	Timeout   time.Duration
	MaxOutput int64
	// Per-process rlimits, applied while the command is stopped at its exec,
	// before its first instruction. Zero = unset (or inherited).
	CPUTime      time.Duration
	AddressSpace int64
	FileSize     int64
	OpenFiles    int
	Nproc        int
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

const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// run executes one command to completion and reports which limit fired.
func Run(ctx context.Context, s ExecSpec, st Starter, isolation string, counters LimitCounters) (core.ExecResult, error) {
	res, _, err := RunPgid(ctx, s, st, isolation, counters)
	return res, err
}

// RunPgid is run that also returns the command's process group (0 if it
// never started).
func RunPgid(ctx context.Context, s ExecSpec, st Starter, isolation string, counters LimitCounters) (res core.ExecResult, pgid int, err error) {
	c, res, err := StartCmd(ctx, s, st, isolation, counters)
	if c == nil {
		return res, 0, err
	}
	return c.Finish()
}

// Cmd is a started command whose exit and output Collect and Finish
// collect. Starting and finishing are split so that the init can fork on
// its spawner thread, wait there too while no other request comes, and
// hand the rest to another goroutine when one does.
type Cmd struct {
	s         ExecSpec
	isolation string
	counters  LimitCounters
	begin     time.Time
	pid       int
	wait      WaitFunc
	// exitFD turns readable when the command has exited: its pidfd, or,
	// on kernels without CLONE_PIDFD, a pipe a goroutine closes once wait
	// returned (the status is then in waited).
	exitFD int
	waited chan waitOut
	out    outputs // our ends of the output pipes, non-blocking
	// reap, when the starter is a PID 1 that reaps by polling, is called
	// while the command runs, paced by reapPace (see orphanReaper).
	reap  func() bool
	oom0  uint64
	pids0 uint64

	// finished stops a late timer or cancellation from killing the group
	// after the command has ended: its background children are meant to
	// outlive the exec.
	mu        sync.Mutex
	timedOut  bool
	finished  bool
	timer     *time.Timer
	stopWatch func() bool
	ctx       context.Context

	// What Collect has done so far.
	exited    bool // and reaped; ws, ru, werr hold the result
	groupGone bool // the group of a killed command is reaped too
	drained   bool
	ws        syscall.WaitStatus
	ru        syscall.Rusage
	werr      error
	killed    bool
	grace     time.Time // the drain ends then, unless output is unread
	graceMax  time.Time // and at the latest then
}

type waitOut struct {
	ws  syscall.WaitStatus
	ru  syscall.Rusage
	err error
}

// StartCmd starts s; its timeout and ctx's end kill its process group
// from then on. When it returns a nil Cmd, the result (a command not
// found, say) or the error is final.
func StartCmd(ctx context.Context, s ExecSpec, st Starter, isolation string, counters LimitCounters) (*Cmd, core.ExecResult, error) {
	res := core.ExecResult{Isolation: isolation}
	if len(s.Argv) == 0 {
		return nil, res, errors.New("exec: empty command")
	}
	begin := time.Now()
	argv0, err := lookPath(s.Argv[0], s.Env, s.Dir)
	if err != nil {
		res.ExitCode = 127
		res.Stderr = fmt.Sprintf("rlhost: %s: %v\n", s.Argv[0], err)
		res.Duration = time.Since(begin)
		res.DurationMS = float64(res.Duration.Microseconds()) / 1000
		return nil, res, nil
	}

	// The command's ends stay plain blocking fds (closed once it has
	// them); ours are non-blocking and polled together with the exit, by
	// one thread, with no reader goroutines. A command given no input
	// reads /dev/null, as it would from exec.Command: one open instead of
	// a pipe whose other end is closed at once.
	fds, err := takeFDs(st)
	if err != nil {
		return nil, res, fmt.Errorf("exec: %w", err)
	}
	var stdinW *os.File
	stdinR := fds.null
	if len(s.Stdin) > 0 {
		w, r, err := rawPipe(1)
		if err != nil {
			fds.close()
			return nil, res, fmt.Errorf("exec: stdin pipe: %w", err)
		}
		unix.Close(fds.null)
		stdinR, stdinW = r, os.NewFile(uintptr(w), "stdin")
	}
	closeStdinW := func() {
		if stdinW != nil {
			stdinW.Close()
		}
	}
	outR, outW, errR, errW := fds.outR, fds.outW, fds.errR, fds.errW

	c := &Cmd{s: s, isolation: isolation, counters: counters, begin: begin, exitFD: -1, ctx: ctx,
		out: outputs{fds: [2]int{outR, errR}, bufs: [2]capBuf{{max: s.MaxOutput}, {max: s.MaxOutput}}}}
	if r, ok := st.(orphanReaper); ok {
		c.reap = r.reapOrphans
	}
	if counters != nil {
		c.oom0, c.pids0 = counters()
	}
	pidfd := -1
	attr := &syscall.ProcAttr{
		Dir:   s.Dir,
		Env:   s.Env,
		Files: []uintptr{uintptr(stdinR), uintptr(outW), uintptr(errW)},
		// Its own process group, so a timeout can kill the whole tree at
		// once. The pidfd (clone's CLONE_PIDFD, not clone3, which the
		// seccomp filter refuses) signals the exit in the same poll as the
		// output.
		Sys: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, PidFD: &pidfd},
	}
	var atExec func(int) error
	if s.CPUTime > 0 || s.AddressSpace > 0 || s.FileSize > 0 || s.OpenFiles > 0 || s.Nproc > 0 {
		atExec = func(pid int) error { return applyRlimits(pid, s) }
	}
	pid, wait, err := st.Start(argv0, s.Argv, attr, atExec)
	unix.Close(stdinR)
	unix.Close(outW)
	unix.Close(errW)
	if p, ok := st.(fdPreparer); ok {
		p.spareFDs().prepare() // while this command runs
	}
	if err != nil {
		if pidfd >= 0 {
			unix.Close(pidfd)
		}
		closeStdinW()
		unix.Close(outR)
		unix.Close(errR)
		res.ExitCode = 126
		if errors.Is(err, syscall.ENOENT) {
			res.ExitCode = 127
		}
		res.Stderr = fmt.Sprintf("rlhost: %s: %v\n", s.Argv[0], err)
		res.Duration = time.Since(begin)
		res.DurationMS = float64(res.Duration.Microseconds()) / 1000
		return nil, res, nil
	}
	c.pid, c.wait = pid, wait
	if stdinW != nil {
		go func() {
			stdinW.Write(s.Stdin) // EPIPE when the command ignores stdin is fine
			stdinW.Close()
		}()
	}
	if s.Timeout > 0 {
		c.timer = time.AfterFunc(s.Timeout, func() { c.killGroup(true) })
	}
	c.stopWatch = context.AfterFunc(ctx, func() { c.killGroup(false) })
	if pidfd >= 0 && pidfdPolls(st, pidfd) {
		c.exitFD = pidfd
		return c, res, nil
	}
	if pidfd >= 0 {
		unix.Close(pidfd)
	}
	// No pidfd to poll (before Linux 5.3): a goroutine waits, and closing
	// its pipe wakes the poll.
	r, w, err := rawPipe(0)
	if err != nil {
		// No way to watch for its exit: stop it rather than leave it.
		c.killGroup(false)
		wait()
		c.stopWatch()
		if c.timer != nil {
			c.timer.Stop()
		}
		unix.Close(outR)
		unix.Close(errR)
		return nil, res, fmt.Errorf("exec: exit pipe: %w", err)
	}
	c.exitFD = r
	c.waited = make(chan waitOut, 1)
	go func() {
		ws, ru, werr := wait()
		c.waited <- waitOut{ws, ru, werr}
		unix.Close(w)
	}()
	return c, res, nil
}

// PidfdPoller is a Starter that knows whether the kernel reports a
// process's exit on its pidfd.
type PidfdPoller interface {
	PidfdPolls() bool
}

// pidfdPolls reports whether poll on pidfd will report the exit: Linux 5.3
// and later; 5.2 has CLONE_PIDFD, but poll on its pidfds returns the
// default mask at once, POLLOUT included, which a pidfd never reports
// otherwise. Unless st knows, one poll finds out.
func pidfdPolls(st Starter, pidfd int) bool {
	if p, ok := st.(PidfdPoller); ok {
		return p.PidfdPolls()
	}
	pfd := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN | unix.POLLOUT}}
	_, err := unix.Poll(pfd, 0)
	return err == nil && pfd[0].Revents&unix.POLLOUT == 0
}

// killGroup kills the command's process group, unless it has ended.
func (c *Cmd) killGroup(timeout bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.finished {
		return
	}
	if timeout {
		c.timedOut = true
	}
	syscall.Kill(-c.pid, syscall.SIGKILL)
	syscall.Kill(c.pid, syscall.SIGKILL) // in case it left its group already
}

// Collect waits for the command to exit, reaps it and drains its output.
// With stop >= 0 it returns false as soon as stop turns readable (another
// request has come), and before anything that can take long besides the
// command itself (waiting for a killed group to be reaped); a later call
// goes on from there. It reports whether all is done.
func (c *Cmd) Collect(stop int) bool {
	if !c.exited {
		if !c.out.collectUntil(c.exitFD, stop, c.reap) {
			return false
		}
		unix.Close(c.exitFD)
		if c.waited != nil {
			w := <-c.waited
			c.ws, c.ru, c.werr = w.ws, w.ru, w.err
		} else {
			c.ws, c.ru, c.werr = c.wait()
		}
		c.mu.Lock()
		c.finished = true
		c.killed = c.timedOut
		c.mu.Unlock()
		c.stopWatch()
		if c.timer != nil {
			c.timer.Stop()
		}
		c.exited = true
		c.groupGone = !(c.werr != nil || c.killed || c.ctx.Err() != nil)
		now := time.Now()
		c.grace, c.graceMax = now.Add(drainGrace), now.Add(drainMax)
	}
	if !c.groupGone {
		if stop >= 0 {
			return false
		}
		// The tree is gone (and reaped) before the result says so. The wait
		// ends as soon as the group is empty; the bound is only for a kernel
		// that cannot reap at all, and must allow for a loaded machine, where
		// reaping a killed tree can take longer than half a second.
		killGroupAndWait(c.pid, groupGoneLimit, c.reap)
		c.groupGone = true
		now := time.Now()
		c.grace, c.graceMax = now.Add(drainGrace), now.Add(drainMax)
	}
	if !c.drained {
		if !c.out.drain(&c.grace, c.graceMax, stop, c.reap) {
			return false
		}
		c.drained = true
	}
	return true
}

// Finish collects what Collect has not yet and reports the result: exit
// status, output, and which limit fired. It runs once.
func (c *Cmd) Finish() (res core.ExecResult, pgid int, err error) {
	c.Collect(-1)
	s, pid, ws, ru := c.s, c.pid, c.ws, c.ru
	res = core.ExecResult{Isolation: c.isolation}
	pgid = pid
	finish := func() core.ExecResult {
		res.Duration = time.Since(c.begin)
		res.DurationMS = float64(res.Duration.Microseconds()) / 1000
		return res
	}
	if c.werr != nil {
		return finish(), pgid, fmt.Errorf("exec: wait for pid %d: %w", pid, c.werr)
	}
	res.Stdout = string(c.out.bufs[0].buf)
	res.Stderr = string(c.out.bufs[1].buf)
	res.OutputTruncated = c.out.bufs[0].truncated || c.out.bufs[1].truncated
	res.TimedOut = c.killed
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
	if c.counters != nil {
		oom1, pids1 := c.counters()
		res.OOMKilled = oom1 > c.oom0
		res.PidsExceeded = pids1 > c.pids0
	}
	if c.ctx.Err() != nil && !res.TimedOut {
		return finish(), pgid, fmt.Errorf("exec: %w", c.ctx.Err())
	}
	return finish(), pgid, nil
}

// outputs reads a command's stdout and stderr pipes (fds[i] = -1 once at
// EOF and closed) into capped buffers.
type outputs struct {
	fds   [2]int
	bufs  [2]capBuf
	chunk []byte
}

// collectUntil reads output until exitFD turns readable (the command has
// exited: true) or stop does first (false). A negative stop is none. A
// non-nil reap is called meanwhile, paced by reapPace.
func (o *outputs) collectUntil(exitFD, stop int, reap func() bool) bool {
	pfd := []unix.PollFd{{Fd: int32(exitFD), Events: unix.POLLIN}, {}, {}, {Fd: int32(stop), Events: unix.POLLIN}}
	var pace reapPace
	var reapAt time.Time
	if reap != nil {
		reapAt = time.Now().Add(pace.next(false))
	}
	for {
		// A negative fd is skipped by poll: a pipe at EOF.
		pfd[1] = unix.PollFd{Fd: int32(o.fds[0]), Events: unix.POLLIN}
		pfd[2] = unix.PollFd{Fd: int32(o.fds[1]), Events: unix.POLLIN}
		timeout := -1
		if reap != nil {
			// A deadline, not a timeout per poll: output that keeps coming
			// must not put the reaping off.
			wait := time.Until(reapAt)
			if wait <= 0 {
				wait = pace.next(reap())
				reapAt = time.Now().Add(wait)
			}
			timeout = int((wait + time.Millisecond - 1) / time.Millisecond)
		}
		n, err := unix.Poll(pfd, timeout)
		if err == nil && n == 0 {
			continue
		}
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			// Cannot happen with valid fds. Blocking in the wait that
			// follows is left to a caller with no stop fd, which can afford
			// it.
			return stop < 0
		}
		o.readReady(pfd[1:3])
		if pfd[0].Revents != 0 {
			return true
		}
		if pfd[3].Revents != 0 {
			return false
		}
	}
}

// readReady reads every pipe poll reported ready until it would block.
func (o *outputs) readReady(pfd []unix.PollFd) {
	for i := range o.fds {
		if o.fds[i] >= 0 && pfd[i].Revents != 0 {
			o.read(i)
		}
	}
}

// read empties pipe i, closing it at EOF. Reads go through a small
// buffer on the stack until one fills it: most commands print little or
// nothing, and a 64 KiB buffer per command would be a large allocation on
// every warm exec, zeroed, page-faulted in again after each scavenge, and
// bringing on garbage collections.
func (o *outputs) read(i int) {
	var small [2 << 10]byte
	buf := small[:]
	if o.chunk != nil {
		buf = o.chunk
	}
	for {
		n, err := unix.Read(o.fds[i], buf)
		if n > 0 {
			o.bufs[i].add(buf[:n])
			if n == len(buf) && o.chunk == nil {
				o.chunk = make([]byte, 64<<10) // a large output: fewer reads
				buf = o.chunk
			}
			continue
		}
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			return
		}
		unix.Close(o.fds[i]) // EOF (or an error no read would recover from)
		o.fds[i] = -1
		return
	}
}

// drain collects output still in flight after the command exited: until
// both pipes are at EOF, or until *grace when a background child that
// inherited them keeps them open. A loaded machine can leave this thread
// unscheduled for longer than the grace while the command's own last
// output still sits in a pipe; cutting then would drop it (a verdict
// printed just before exit, say). So the grace is renewed while either
// pipe holds unread bytes when it ends, up to graceMax; a pipe that stays
// empty, held open by a background child, is cut. With stop >= 0 it
// returns false as soon as stop turns readable, to be called again.
func (o *outputs) drain(grace *time.Time, graceMax time.Time, stop int, reap func() bool) bool {
	pfd := make([]unix.PollFd, 3)
	reaped := time.Now() // the first after reapEvery: most drains end sooner
	for o.fds[0] >= 0 || o.fds[1] >= 0 {
		if reap != nil && time.Since(reaped) >= reapEvery {
			reap() // the background children that hold the pipes may leave orphans
			reaped = time.Now()
		}
		for i := range o.fds {
			pfd[i] = unix.PollFd{Fd: int32(o.fds[i]), Events: unix.POLLIN}
		}
		pfd[2] = unix.PollFd{Fd: int32(stop), Events: unix.POLLIN}
		wait := time.Until(*grace)
		ms := int((wait + time.Millisecond - 1) / time.Millisecond)
		if wait <= 0 {
			ms = 0
		}
		n, err := unix.Poll(pfd, ms)
		if err == unix.EINTR {
			continue
		}
		if err == nil && pfd[2].Revents != 0 {
			return false
		}
		if err != nil || n == 0 {
			if wait > 0 && err == nil {
				continue // the grace is over: one more look for unread bytes
			}
			break // the grace ended with nothing unread
		}
		if wait <= 0 {
			if !time.Now().Before(graceMax) {
				break
			}
			*grace = time.Now().Add(drainGrace) // unread bytes at its end
		}
		o.readReady(pfd[:2])
	}
	for i := range o.fds {
		if o.fds[i] >= 0 {
			unix.Close(o.fds[i])
			o.fds[i] = -1
		}
	}
	return true
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

// execFDs are one command's standard streams: /dev/null for its stdin
// (unless it is given input), and its stdout and stderr pipes, our ends
// non-blocking.
type execFDs struct{ null, outR, outW, errR, errW int }

func newExecFDs() (execFDs, error) {
	f := execFDs{null: -1, outR: -1, outW: -1, errR: -1, errW: -1}
	var err error
	if f.null, err = unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
		return f, fmt.Errorf("stdin: %w", err)
	}
	if f.outR, f.outW, err = rawPipe(0); err != nil {
		f.close()
		return f, fmt.Errorf("stdout pipe: %w", err)
	}
	if f.errR, f.errW, err = rawPipe(0); err != nil {
		f.close()
		return f, fmt.Errorf("stderr pipe: %w", err)
	}
	return f, nil
}

func (f execFDs) close() {
	for _, fd := range []int{f.null, f.outR, f.outW, f.errR, f.errW} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// orphanReaper is a Starter whose process adopts orphans (a sandbox's
// PID 1) and reaps them by polling rather than on SIGCHLD. reapOrphans
// reports whether it reaped any.
type orphanReaper interface {
	reapOrphans() bool
}

// reapEvery and reapEveryMax pace a PID 1 that reaps by polling (see
// reapPace): an orphan that has exited holds its pid, which counts against
// the sandbox's pids limit, until it is reaped. A shell loop that starts
// orphans (`(cmd &)`) makes one about every 0.3 to 1 ms.
const (
	reapEvery    = 2 * time.Millisecond
	reapEveryMax = 160 * time.Millisecond
)

// reapPace spaces the reaps of a wait that polls for exited orphans:
// reapEvery at first and after a reap that collected a process, twice the
// previous wait after one that did not, up to reapEveryMax. Orphans that
// keep exiting are reaped every reapEvery; processes that run on cost a
// wake-up every reapEveryMax.
type reapPace struct{ wait time.Duration }

func (p *reapPace) next(reaped bool) time.Duration {
	if p.wait == 0 || reaped {
		p.wait = reapEvery
	} else {
		p.wait = min(2*p.wait, reapEveryMax)
	}
	return p.wait
}

// fdPreparer is a Starter that makes the next command's streams ahead,
// while the one before runs, so an exec does not wait for the five
// syscalls that make them.
type fdPreparer interface {
	spareFDs() *spareFDs
}

// takeFDs returns streams st prepared, or new ones.
func takeFDs(st Starter) (execFDs, error) {
	if p, ok := st.(fdPreparer); ok {
		if f, ok := p.spareFDs().take(); ok {
			return f, nil
		}
	}
	return newExecFDs()
}

// spareFDs holds at most one set of prepared streams.
type spareFDs struct {
	mu    sync.Mutex
	spare *execFDs
}

func (s *spareFDs) take() (execFDs, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.spare == nil {
		return execFDs{}, false
	}
	f := *s.spare
	s.spare = nil
	return f, true
}

// prepare makes a set if none is held; a failure is left for the exec
// that needs the streams to report.
func (s *spareFDs) prepare() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.spare != nil {
		return
	}
	if f, err := newExecFDs(); err == nil {
		s.spare = &f
	}
}

// rawPipe makes a close-on-exec pipe and returns our end (0: the read end,
// 1: the write end), non-blocking, and the other end, blocking, for the
// command.
func rawPipe(ours int) (int, int, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return -1, -1, err
	}
	// F_SETFL replaces the status flags; a new pipe end has none but its
	// access mode, which F_SETFL ignores. (One call, not SetNonblock's two.)
	if _, err := unix.FcntlInt(uintptr(p[ours]), unix.F_SETFL, unix.O_NONBLOCK); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return -1, -1, err
	}
	return p[ours], p[1-ours], nil
}

// capBuf keeps the first max bytes written and counts the rest, so a
// flooding writer never blocks on a full pipe.
type capBuf struct {
	max       int64
	buf       []byte
	truncated bool
}

func (c *capBuf) add(b []byte) {
	room := c.max - int64(len(c.buf))
	switch {
	case room >= int64(len(b)):
		c.buf = append(c.buf, b...)
	case room > 0:
		c.buf = append(c.buf, b[:room]...)
		c.truncated = true
	default:
		c.truncated = true
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
// runs on. It gives up after limit. A non-nil reap reaps what has exited:
// members whose parent died are the caller's to reap when it is a PID 1.
func killGroupAndWait(pgid int, limit time.Duration, reap func() bool) {
	if pgid <= 1 {
		return
	}
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(-pgid, syscall.SIGKILL); err == syscall.ESRCH {
			return
		}
		if reap != nil {
			reap()
		}
		time.Sleep(time.Millisecond)
	}
}
