package sandboxinit

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rlhost/rlhost/plugins/local/confine"
)

// initMain is the sandbox init: PID 1 of the sandbox's PID namespace. It
// builds the root view, then serves requests from the backend until the
// control socket closes, and exits; its death kills every process left in
// the namespace.
//
// With netPrepared, the launcher started it in a network namespace made
// ahead, lo up; otherwise, unless the sandbox shares the host's network,
// it brings up lo in the namespace it was cloned with.
func initMain(netPrepared bool) error {
	// Commands inherit no fd but their own three: not the control socket,
	// not the cgroup files (with the commands' cgroup.procs a command could
	// move the init into it), and not whatever the process that started
	// rlhost left open without close-on-exec.
	unix.Close(4) // the fd this binary was executed through
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		// Before Linux 5.11: one by one.
		if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
			for _, e := range ents {
				if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
					unix.CloseOnExec(fd)
				}
			}
		}
	}
	// Not dumpable: commands share the init's uid, and must not ptrace it
	// or read its /proc files (its threads other than the spawner keep
	// capabilities in the sandbox's user namespace).
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("set non-dumpable: %w", err)
	}
	// The spawner thread is started first: creating a thread and dropping
	// its capabilities take longer than reading the Setup, and until then
	// the thread is the critical path of a create.
	sp := startSpawner()
	// The control socket stays blocking, off the runtime's poller: the
	// spawner thread serves it with read(2), so a request wakes the thread
	// that forks, and no goroutine has to be handed to it.
	ctl := os.NewFile(3, "ctl")
	// Frames are read through a buffer: a frame's header and body then
	// come in one read(2), not two.
	in := bufio.NewReaderSize(ctl, 64<<10)
	setup, err := ReadSetup(in)
	if err != nil {
		return fmt.Errorf("read setup: %w", err)
	}
	if setup.Proto != ProtocolVersion {
		err := fmt.Errorf("helper speaks sandbox protocol %d, the backend %d: rebuild the helper binary", ProtocolVersion, setup.Proto)
		WriteResponse(ctl, &Response{Err: err.Error()})
		return err
	}
	srv, err := newInitServer(setup, sp, netPrepared)
	if err != nil {
		WriteResponse(ctl, &Response{Err: err.Error()})
		return err
	}
	// Served from the spawner thread: an exec's command is forked right
	// where its request was read. The loop is handed over before the
	// backend hears the init is ready, so no request can come first.
	served := make(chan struct{})
	sp.serve <- func() {
		srv.serve(ctl, in)
		close(served)
	}
	if err := WriteResponse(ctl, &Response{}); err != nil {
		return fmt.Errorf("send ready: %w", err)
	}
	<-served
	return nil
}

type initServer struct {
	setup     Setup
	isolation string // reported in every exec result
	wsMu      sync.Mutex
	ws        *confine.Root // replaced by a reset
	reap      *reaper

	wmu      sync.Mutex
	mu       sync.Mutex
	cancels  map[uint64]context.CancelFunc
	oomFloor string        // the init's own oom_score_adj, restored after each fork
	oomAdj   *os.File      // /proc/self/oom_score_adj, kept open: written twice per exec
	warm     chan struct{} // closed once spare threads and signal handlers are set
	// pidfdPolls: the kernel reports a process's exit on its pidfd (Linux
	// 5.3; 5.2 has CLONE_PIDFD without it).
	pidfdPolls bool
	fds        spareFDs // the next command's streams, made ahead
}

func (srv *initServer) setOOMAdj(v string) {
	if srv.oomAdj != nil {
		srv.oomAdj.WriteAt([]byte(v), 0)
	}
}

func (srv *initServer) workspace() *confine.Root {
	srv.wsMu.Lock()
	defer srv.wsMu.Unlock()
	return srv.ws
}

func newInitServer(s Setup, sp *spawnerThread, netPrepared bool) (*initServer, error) {
	var tr *Tracer
	if s.Trace {
		tr = &Tracer{what: "init", start: time.Now(), last: time.Now()}
		defer tr.Done()
	}
	// Independent of the root view, so done on the other CPU while it is
	// built, and waited for before serving: the signal handlers, the
	// spawner thread (its capabilities are per thread, and the mounts below
	// need the other threads'), the spare threads, and the netpoller's
	// lazy set-up, which would otherwise land on the sandbox's first exec.
	//
	// Signals sent from inside: PID 1 of a PID namespace gets only those
	// it handles, and Go installs a handler for most at start-up; a
	// handled signal nobody asked for makes Go's runtime exit or crash
	// for these, and is dropped for the rest (SIGUSR1, SIGPIPE, SIGALRM,
	// the real-time ones, ...). So these are caught, which makes `kill
	// -TERM 1` from inside harmless; handlers (unlike SIG_IGN) are reset
	// for the commands we start. SIGSEGV and friends count: sent with
	// kill(2) they are not faults. Registering one costs a round trip to
	// the runtime's signal-mask thread, which competes with a create's
	// critical path, hence this list rather than all 31.
	// TestInitSurvivesEverySignal sends all of them.
	signalsSet := make(chan struct{})
	reap := newReaper()
	go func() {
		defaultChildSignal()
		sigs := make(chan os.Signal, 16)
		signal.Notify(sigs, fatalToGo...)
		close(signalsSet)
		for range sigs {
		}
	}()
	// The spawner joins the commands' cgroup (v1) and installs the
	// seccomp filter on its own thread while this one builds the root:
	// neither depends on the root, and every command it forks inherits both.
	sp.confine <- func() error {
		if len(s.CgroupTaskFDs) > 0 {
			if err := joinCgroups(s.CgroupTaskFDs); err != nil {
				return err
			}
		}
		if len(s.Seccomp) > 0 {
			return installSeccomp(s.Seccomp)
		}
		return nil
	}
	prewarmed := make(chan struct{})
	go func() {
		if len(s.CgroupTaskFDs) == 0 && s.CgroupProcsFD <= 0 {
			prewarmThreads()
		}
		warmExecPath()
		close(prewarmed)
	}()
	tr.Mark("started")
	if s.Template != "" {
		if err := templateRoot(s, tr); err != nil {
			return nil, err
		}
	} else if err := buildRoot(s, tr); err != nil {
		return nil, err
	}
	tr.Mark("root")
	if err := unix.Sethostname([]byte(s.Hostname)); err != nil {
		return nil, fmt.Errorf("sethostname: %w", err)
	}
	if !s.Network && !netPrepared {
		if err := loopbackUp(); err != nil {
			return nil, err
		}
	}
	// Inherited by every command: no core dumps, and the file-size and
	// open-file caps race-free (exec re-applies its own per process).
	for _, l := range []struct {
		res int
		v   uint64
	}{{unix.RLIMIT_CORE, 0}, {unix.RLIMIT_FSIZE, uint64(s.FileSize)}, {unix.RLIMIT_NOFILE, uint64(max(s.OpenFiles, 64))}} {
		if err := unix.Setrlimit(l.res, &unix.Rlimit{Cur: l.v, Max: l.v}); err != nil {
			return nil, fmt.Errorf("setrlimit %d: %w", l.res, err)
		}
	}
	tr.Mark("host")
	ws, err := confine.Open("/workspace", "/workspace")
	if err != nil {
		return nil, err
	}
	srv := &initServer{setup: s, isolation: s.Isolation, ws: ws, reap: reap, cancels: map[uint64]context.CancelFunc{}, oomFloor: "0"}
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		srv.pidfdPolls = kernelAtLeast(unix.ByteSliceToString(uts.Release[:]), 5, 3)
	}
	if srv.isolation == "" {
		srv.isolation = "namespaces"
	}
	if b, err := os.ReadFile("/proc/self/oom_score_adj"); err == nil {
		srv.oomFloor = strings.TrimSpace(string(b))
	}
	if f, err := os.OpenFile("/proc/self/oom_score_adj", os.O_WRONLY, 0); err == nil {
		srv.oomAdj = f
	}
	tr.Mark("files")
	if err := <-sp.ready; err != nil {
		return nil, err
	}
	tr.Mark("spawner")
	// The spare threads and the signal handlers must be in place before
	// the first command starts, not before the backend hears the init is
	// ready: the handshake and the first request overlap with the rest.
	srv.warm = make(chan struct{})
	go func() {
		<-prewarmed
		<-signalsSet
		close(srv.warm)
		srv.fds.prepare() // the first command's streams, if it is not already here
	}()
	return srv, nil
}

// fatalToGo are the signals whose arrival, unless a channel is notified,
// makes the Go runtime exit (SIGHUP, SIGINT, SIGTERM) or crash (the rest).
var fatalToGo = []os.Signal{
	syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM,
	syscall.SIGQUIT, syscall.SIGILL, syscall.SIGTRAP, syscall.SIGABRT, syscall.SIGBUS,
	syscall.SIGFPE, syscall.SIGSEGV, syscall.SIGSTKFLT, syscall.SIGSYS,
}

// warmExecPath makes the runtime set up its netpoller, so the sandbox's
// first exec does not pay for that lazy initialisation.
func warmExecPath() {
	if r, w, err := os.Pipe(); err == nil {
		r.Close()
		w.Close()
	}
}

// loopbackUp brings up lo in the sandbox's private network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: get flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: up: %w", err)
	}
	return nil
}

// prewarmThreads makes the runtime create spare OS threads now, before the
// sandbox runs anything, so the init never needs a new one while a fork
// bomb holds every pid left. Each goroutine pins a thread; while all are
// pinned the scheduler must start new ones; once unpinned the threads stay
// idle in the runtime's pool.
//
// Only an init without cgroups calls it. With them, a fork bomb cannot
// take the init's pids: the init's threads have an allowance of their own
// outside the commands' pids.max (the backend's initThreadAllowance), and
// the runtime starts new threads from its template thread, never from the
// spawner, the one thread in the commands' cgroup (v1). Six spare threads
// cost about 3% of a create.
func prewarmThreads() {
	const n = 6
	var pinned sync.WaitGroup
	release := make(chan struct{})
	pinned.Add(n)
	for i := 0; i < n; i++ {
		go func() {
			runtime.LockOSThread()
			pinned.Done()
			<-release
			runtime.UnlockOSThread()
		}()
	}
	pinned.Wait()
	close(release)
}

// spawnerThread is the thread every command is forked from (see run).
type spawnerThread struct {
	confine chan func() error // sent once, when the Setup is known
	ready   chan error        // confine's result
	serve   chan func()       // sent once: the serve loop
}

func startSpawner() *spawnerThread {
	sp := &spawnerThread{confine: make(chan func() error, 1), ready: make(chan error, 1), serve: make(chan func(), 1)}
	go sp.run()
	return sp
}

// run owns one OS thread that has no_new_privs set and every capability
// dropped (bounding, ambient, inheritable, permitted). Children forked
// from it inherit that, so commands run as the sandbox's root user with no
// capabilities, and setuid bits cannot give any back. Before it says it is
// ready it runs the confine func it is sent (the commands' cgroup and the
// seccomp filter), which every command then inherits. Then it serves
// the control socket (see serve).
func (sp *spawnerThread) run() {
	runtime.LockOSThread() // never unlocked: the thread dies with the init
	if unix.Gettid() == unix.Getpid() {
		// Not the main thread: it stands for the whole process in
		// /proc/<pid>/cgroup and to the OOM killer, and under v1 the
		// spawner moves into the commands' cgroup. Keep this goroutine
		// parked on the main thread, so no other uses it, and try again.
		go sp.run()
		select {}
	}
	err := dropPrivileges()
	confine := <-sp.confine
	if err == nil {
		err = confine()
	}
	sp.ready <- err
	if err != nil {
		return
	}
	// Wait for the first request in poll(2), not on a channel: a goroutine
	// locked to its thread that parks in the scheduler, once woken, waits
	// for a processor to be handed to its thread, and while the rest of the
	// init is starting up none is free; a thread woken by the kernel takes
	// any idle processor.
	fds := []unix.PollFd{{Fd: ctlFD, Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); err != unix.EINTR {
			break
		}
	}
	(<-sp.serve)()
}

// joinCgroups moves the calling thread (only it: cgroup v1 places
// threads) into the cgroups whose tasks files are the given fds.
func joinCgroups(fds []int) error {
	for _, fd := range fds {
		_, err := unix.Pwrite(fd, []byte("0"), 0)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("join the commands' cgroup: %w", err)
		}
	}
	return nil
}

// installSeccomp loads prog (struct sock_filter entries) as a seccomp
// filter of the calling thread only; no_new_privs is already set.
func installSeccomp(prog []byte) error {
	if len(prog) == 0 || len(prog)%8 != 0 || len(prog)/8 > 4096 {
		return fmt.Errorf("seccomp: malformed filter of %d bytes", len(prog))
	}
	insns := make([]unix.SockFilter, len(prog)/8)
	for i := range insns {
		b := prog[i*8:]
		insns[i] = unix.SockFilter{Code: binary.NativeEndian.Uint16(b), Jt: b[2], Jf: b[3], K: binary.NativeEndian.Uint32(b[4:])}
	}
	fprog := unix.SockFprog{Len: uint16(len(insns)), Filter: &insns[0]}
	if _, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		return fmt.Errorf("seccomp: install filter: %w", errno)
	}
	runtime.KeepAlive(insns)
	return nil
}

func dropPrivileges() error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	// Every capability the kernel knows, until it says EINVAL (past
	// CAP_LAST_CAP): cheaper than reading /proc/sys/kernel/cap_last_cap.
	for c := 0; c < 64; c++ {
		err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
		if err == unix.EINVAL {
			break
		}
		if err != nil {
			return fmt.Errorf("drop capability %d from bounding set: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && err != unix.EINVAL {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("clear capabilities: %w", err)
	}
	return nil
}

// reaper is PID 1's child reaper: it waits for every child (orphans
// reparented to the init included) and hands exit statuses of the
// commands it started to their waiters.
type reaper struct {
	mu      sync.Mutex
	waiters map[int]chan waitRes
	born    time.Time    // monotonic reading the times below count from
	last    atomic.Int64 // when reapAll last ran, in nanoseconds since born
}

func newReaper() *reaper {
	return &reaper{waiters: map[int]chan waitRes{}, born: time.Now()}
}

// reapDue is how long a stream of requests may keep awaitRequest from
// reaping on a timeout.
const reapDue = 10 * time.Millisecond

// due reports whether reapAll last ran reapDue ago or more.
func (r *reaper) due() bool {
	return int64(time.Since(r.born))-r.last.Load() >= int64(reapDue)
}

type waitRes struct {
	ws syscall.WaitStatus
	ru syscall.Rusage
}

// defaultChildSignal sets SIGCHLD back to its default disposition, under
// which the kernel discards it. Go's runtime installs a handler for every
// signal; with it, each command's exit interrupted a thread of the init,
// and when the signal was wanted (to reap orphans) woke two more to pass
// it to a goroutine, all on a warm exec's critical path.
// Nothing here needs the signal: a command's exit shows on its pidfd,
// blocking waits do not use it, and orphans are reaped by polling while
// any process but the init is alive (reapPace; see awaitRequest and
// Cmd.Collect). SIG_IGN would be wrong: children would be reaped by the
// kernel, exit statuses lost.
func defaultChildSignal() {
	var act [4]uint64 // struct kernel_sigaction: handler (SIG_DFL), flags, restorer, mask
	unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(syscall.SIGCHLD), uintptr(unsafe.Pointer(&act[0])), 0, 8, 0, 0)
}

// reapAll reaps every child that has exited, handing the statuses of
// commands to their waiters. It reports whether any child is left, and
// whether it reaped one.
func (r *reaper) reapAll() (alive, reaped bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last.Store(int64(time.Since(r.born)))
	for {
		var ws syscall.WaitStatus
		var ru syscall.Rusage
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG|unix.WALL, &ru)
		if err == syscall.EINTR {
			continue
		}
		if pid == 0 {
			return true, reaped // children, none exited
		}
		if err == syscall.ECHILD {
			return false, reaped // no process but this one
		}
		if err != nil {
			return true, reaped // unexpected: keep polling rather than stop reaping
		}
		reaped = true
		if ws.Stopped() {
			// A command that asked to be traced by its parent, the init,
			// stops at its next exec until its timeout kills it.
			continue
		}
		if ch, ok := r.waiters[pid]; ok {
			delete(r.waiters, pid)
			ch <- waitRes{ws, ru}
		}
	}
}

// spawnerStarter starts commands; it is used only on the spawner thread
// (from serve), whose lack of capabilities, seccomp filter and (v1) cgroups
// the commands inherit. It holds the reaper's lock across the fork so the
// pid is registered before it can be reaped.
type spawnerStarter struct{ srv *initServer }

func (s spawnerStarter) PidfdPolls() bool { return s.srv.pidfdPolls }

func (s spawnerStarter) spareFDs() *spareFDs { return &s.srv.fds }

func (s spawnerStarter) Start(argv0 string, argv []string, attr *syscall.ProcAttr, atExec func(pid int) error) (int, WaitFunc, error) {
	<-s.srv.warm
	if fd := s.srv.setup.CgroupProcsFD; fd > 0 {
		// cgroup v2 places whole processes: each command is moved into the
		// commands' cgroup at its exec stop, before it runs anything.
		limits := atExec
		atExec = func(pid int) error {
			if _, err := unix.Pwrite(fd, []byte(strconv.Itoa(pid)), 0); err != nil {
				return fmt.Errorf("move pid %d into the commands' cgroup: %w", pid, err)
			}
			if limits != nil {
				return limits(pid)
			}
			return nil
		}
	}
	r := s.srv.reap
	r.mu.Lock()
	defer r.mu.Unlock()
	// Commands (and whatever they fork) must go first when the sandbox's
	// memory runs out, so the OOM killer does not pick the init. A child
	// inherits oom_score_adj at fork, before it can run anything, so the
	// init raises its own for the length of the fork and lowers it back
	// (allowed without privilege down to the floor it started with, which
	// is also as low as a command can push itself).
	s.srv.setOOMAdj("1000")
	pid, died, err := ForkExecAt(argv0, argv, attr, atExec)
	s.srv.setOOMAdj(s.srv.oomFloor)
	if err != nil {
		return 0, nil, err
	}
	ch := make(chan waitRes, 1)
	if died != nil {
		ch <- waitRes{ws: *died}
		return pid, func() (syscall.WaitStatus, syscall.Rusage, error) {
			w := <-ch
			return w.ws, w.ru, nil
		}, nil
	}
	r.waiters[pid] = ch
	return pid, func() (syscall.WaitStatus, syscall.Rusage, error) {
		// Reap this pid under the reaper's lock, unless a reapAll got
		// there first (then the status is in ch). Usually its pidfd has
		// already reported the exit, so the first try reaps it; until it
		// exits, wait on the pid without reaping (WNOWAIT).
		for {
			r.mu.Lock()
			select {
			case w := <-ch:
				r.mu.Unlock()
				return w.ws, w.ru, nil
			default:
			}
			var ws syscall.WaitStatus
			var ru syscall.Rusage
			got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, &ru)
			if err == nil && got == pid && (ws.Stopped() || ws.Continued()) {
				// A command that asked to be traced by its parent, the init,
				// stops at its next exec (until its timeout kills it): that
				// is not its exit, and now consumed, it leaves the wait
				// below blocked until the exit.
				r.mu.Unlock()
				continue
			}
			if err == nil && got == pid {
				delete(r.waiters, pid)
				r.mu.Unlock()
				return ws, ru, nil
			}
			r.mu.Unlock()
			if err != nil && err != syscall.EINTR {
				w := <-ch // reaped meanwhile by a reapAll
				return w.ws, w.ru, nil
			}
			var si unix.Siginfo
			if err := unix.Waitid(unix.P_PID, pid, &si, unix.WEXITED|unix.WNOWAIT, nil); err != nil && err != unix.EINTR {
				w := <-ch
				return w.ws, w.ru, nil
			}
		}
	}, nil
}

// serve reads requests until the backend closes the socket. It runs on
// the spawner thread: an exec's command is started here (see begin), and
// waited for here too while no other request comes (no goroutine and no
// other thread to wake); once one does, or for any other request, the rest
// is handled on a goroutine of its own, so a long command never holds up
// the next request.
func (srv *initServer) serve(ctl *os.File, in *bufio.Reader) {
	for {
		if in.Buffered() == 0 {
			srv.awaitRequest()
		}
		req, err := ReadRequest(in)
		if err != nil {
			return // the backend is gone: exiting kills the sandbox
		}
		if req.Op == "cancel" {
			srv.mu.Lock()
			if c := srv.cancels[req.ID]; c != nil {
				c()
			}
			srv.mu.Unlock()
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		srv.mu.Lock()
		srv.cancels[req.ID] = cancel
		srv.mu.Unlock()
		run, cmd := srv.begin(ctx, req)
		// A frame already buffered is a request to read now.
		if cmd != nil && in.Buffered() == 0 && cmd.Collect(ctlFD) {
			srv.answer(ctl, req.ID, run(), cancel)
			continue
		}
		go func() { srv.answer(ctl, req.ID, run(), cancel) }()
	}
}

// awaitRequest returns when the control socket has a request to read (or
// has failed). Meanwhile it reaps exited orphans, paced by reapPace, while
// any process but the init is alive; once none is, nothing can exit before
// the next command is forked, and it leaves the wait to the read. It blocks
// first and reaps after: it runs right after an answer, whose reader the
// kernel often wakes on this CPU, to run once this thread sleeps.
func (srv *initServer) awaitRequest() {
	if srv.reap.due() {
		srv.reap.reapAll() // requests keep coming before the poll below times out
	}
	fds := []unix.PollFd{{Fd: ctlFD, Events: unix.POLLIN}}
	var pace reapPace
	wait := pace.next(false)
	for {
		n, err := unix.Poll(fds, int(wait/time.Millisecond))
		if n > 0 || (err != nil && err != unix.EINTR) {
			return
		}
		if err != nil {
			continue
		}
		alive, reaped := srv.reap.reapAll()
		if !alive {
			return
		}
		wait = pace.next(reaped)
	}
}

// reapOrphans reaps what has exited and reports whether it reaped any.
func (srv *initServer) reapOrphans() bool {
	_, reaped := srv.reap.reapAll()
	return reaped
}

func (s spawnerStarter) reapOrphans() bool { return s.srv.reapOrphans() }

// kernelAtLeast reports whether a kernel release ("6.18.44-fc") is at
// least major.minor.
func kernelAtLeast(release string, major, minor int) bool {
	var ma, mi int
	if n, _ := fmt.Sscanf(release, "%d.%d", &ma, &mi); n < 2 {
		return false
	}
	return ma > major || (ma == major && mi >= minor)
}

// ctlFD is the control socket.
const ctlFD = 3

// answer sends the response to request id and forgets the request.
func (srv *initServer) answer(ctl *os.File, id uint64, resp Response, cancel context.CancelFunc) {
	resp.ID = id
	srv.mu.Lock()
	delete(srv.cancels, id)
	srv.mu.Unlock()
	cancel()
	srv.wmu.Lock()
	if err := WriteResponse(ctl, &resp); err != nil && !errors.Is(err, syscall.EPIPE) {
		// An unsendable answer (too large) becomes an error answer.
		WriteResponse(ctl, &Response{ID: id, Err: err.Error(), ErrKind: ErrKind(err)})
	}
	srv.wmu.Unlock()
}

// begin does the part of a request that belongs on the spawner thread,
// starting an exec's command, and returns the rest of its handling, and
// the command when one was started.
func (srv *initServer) begin(ctx context.Context, req Request) (func() Response, *Cmd) {
	if req.Op != "exec" || req.Exec == nil {
		return func() Response { return srv.handle(ctx, req) }, nil
	}
	spec := *req.Exec
	// Inherited from the init already: no exec stop needed for them.
	if spec.FileSize == srv.setup.FileSize {
		spec.FileSize = 0
	}
	if spec.OpenFiles == max(srv.setup.OpenFiles, 64) {
		spec.OpenFiles = 0
	}
	c, r, err := StartCmd(ctx, spec, spawnerStarter{srv}, srv.isolation, nil)
	return func() Response {
		var resp Response
		if c != nil {
			r, resp.Pgid, err = c.Finish()
		}
		resp.Exec = &r
		if errors.Is(err, context.Canceled) {
			err = nil // the backend reports its own context error
		}
		if err != nil {
			resp.Err, resp.ErrKind = err.Error(), ErrKind(err)
		}
		return resp
	}, c
}

func (srv *initServer) handle(ctx context.Context, req Request) Response {
	var resp Response
	var err error
	switch req.Op {
	case "exec":
		err = errors.New("exec without a command")
	case "read":
		resp.Data, err = srv.workspace().ReadFile(req.Path, req.Max)
	case "write":
		err = srv.workspace().WriteFile(req.Path, req.Data, req.Mode, req.Max)
	case "list":
		resp.Files, err = srv.workspace().List(req.Path, MaxListEntries)
	case "killpg":
		killGroupAndWait(req.Pgid, 2*time.Second, srv.reapOrphans)
	case "reset":
		err = srv.reset(time.Now().Add(resetTimeout))
	case "ping":
	default:
		err = fmt.Errorf("unknown op %q", req.Op)
	}
	if err != nil {
		resp.Err, resp.ErrKind = err.Error(), ErrKind(err)
	}
	return resp
}
