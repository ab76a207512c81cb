package local

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/plugins/local/sandboxinit"
)

// initThreadAllowance is added to the sandbox cgroup's pids.max, and
// initMemoryAllowance to its memory limit: the init (a Go program) lives
// there, outside the commands' cgroup that carries the limits, and needs a
// few threads and some memory of its own (plus files written through the
// API, which are charged to it).
const (
	initThreadAllowance = 32
	initMemoryAllowance = 128 << 20
)

// nsBox is the backend's handle on a namespaced sandbox: its init process
// and the socket to it.
type nsBox struct {
	isolation string // as results report it
	pid       int
	uid       int      // host uid of the sandbox's root
	pidfd     *os.File // when started by a launcher (which reaps it)
	conn      net.Conn
	in        *bufio.Reader // conn's frames, read through a buffer
	cg        *sandboxCgroup

	wmu     sync.Mutex
	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]chan sandboxinit.Response
	// reading: a goroutine reads responses (see call); in reads only it.
	reading bool
	dead    chan struct{}
	deadErr error
	exited  chan struct{} // closed once the init is reaped
}

func hostIDs(base int64) (uid, gid int) {
	if os.Geteuid() != 0 {
		return os.Geteuid(), os.Getegid()
	}
	var r [4]byte
	rand.Read(r[:])
	id := int(base) + int(binary.LittleEndian.Uint32(r[:])%uidRange)
	return id, id
}

// startNSBox starts a sandbox init in fresh namespaces and waits until it
// has built its root and is ready to serve requests.
//
// With a launcher l (nil: started directly from this process), the init
// is forked by it and uses its template root view unless spec has a root
// of its own.
// cg, when not nil, is the sandbox's cgroups made ahead (a slot's); they
// are destroyed on failure like those made here. launched runs once the
// init exists, while it starts up.
func startNSBox(ctx context.Context, set *settings, cgr *cgroupRoot, cg *sandboxCgroup, l *launcher, spec core.SandboxSpec, id, entryDir string, launched func(*nsBox) error) (nb *nsBox, err error) {
	tr := sandboxinit.NewTracer("create " + id)
	defer tr.Done()
	s := &nsStart{set: set, spec: spec, id: id, cg: cg}
	defer func() {
		if err != nil {
			s.cg.destroy()
		}
	}()
	defer s.closeFiles()
	defer func() {
		if err != nil && nb == nil && s.conn != nil {
			s.conn.Close()
		}
	}()

	s.describe(l, tr != nil)
	if err := s.openFiles(entryDir); err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, err)
	}
	tr.Mark("files")
	if err := s.makeCgroups(cgr); err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, err)
	}
	tr.Mark("cgroups")
	if err := s.openCgroupFiles(); err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, err)
	}
	tr.Mark("cgfiles")
	// The Setup is written before the init exists: the socket holds it
	// until the init reads it, so the init never waits for it.
	if err := sandboxinit.WriteSetup(s.conn, &s.setup); err != nil {
		return nil, fmt.Errorf("sandbox %s: send setup: %w", id, err)
	}
	tr.Mark("setup")
	if nb, err = s.launch(ctx, l, cgr); err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, err)
	}
	tr.Mark("launch")
	defer func() {
		if err != nil {
			nb.stop()
		}
	}()
	if err := s.joinCgroup(nb); err != nil {
		return nb, fmt.Errorf("sandbox %s: %w", id, err)
	}
	// What needs only the init's pid is done while the init starts up,
	// not after it is ready.
	if s.cg != nil {
		s.cg.counters() // opens the event files now, not on the first exec
	}
	if err := launched(nb); err != nil {
		return nb, err
	}
	tr.Mark("cgroup")
	ready, err := nb.handshake(ctx, set.helper)
	if err != nil {
		return nb, fmt.Errorf("sandbox %s: %w", id, err)
	}
	tr.Mark("ready")
	if ready.Err != "" {
		return nb, fmt.Errorf("sandbox %s: init setup: %s", id, ready.Err)
	}
	return nb, nil
}

// nsStart is a namespaced sandbox on its way up: what startNSBox has made
// for it so far, for the next step to use and a failure to undo.
type nsStart struct {
	set      *settings
	spec     core.SandboxSpec
	id       string
	setup    sandboxinit.Setup
	uid, gid int // the host ids of the sandbox's root

	conn  net.Conn   // the backend's end of the control socket
	child *os.File   // the init's end
	exe   *os.File   // the helper binary, by fd
	extra []*os.File // what the init inherits: child, exe, the commands' cgroup files
	files []*os.File // every file opened for the init, closed once it runs
	cg    *sandboxCgroup
	cgDir *os.File // cgroup v2: the sandbox cgroup the init is born in
	// bornInCgroup: the launcher forks the init into its cgroups (v1).
	bornInCgroup bool
}

// closeFiles closes what was opened for the init; only the init may hold
// its end of the socket, so that its exit reads as EOF here.
func (s *nsStart) closeFiles() {
	for _, f := range s.files {
		f.Close()
	}
	s.files = nil
}

// describe fills in the Setup the init builds the sandbox from, and picks
// the sandbox root's host ids.
func (s *nsStart) describe(l *launcher, trace bool) {
	lim := s.spec.Limits
	s.setup = sandboxinit.Setup{
		Proto:     sandboxinit.ProtocolVersion,
		Trace:     trace,
		TmpBytes:  orDefault(lim.TmpBytes, defaultTmpBytes),
		Network:   s.spec.Network,
		Hostname:  "sandbox",
		FileSize:  orDefault(lim.FileSizeBytes, defaultFileSize),
		OpenFiles: int(orDefault(int64(lim.OpenFiles), defaultOpenFiles)),
		Seccomp:   s.set.seccomp,
		Isolation: s.set.isolationName(),
	}
	if l != nil && s.spec.Rootfs == "" {
		s.setup.Template = l.dir
	} else {
		s.set.rootFor(&s.setup, s.spec.Rootfs)
		s.setup.Hide = hiddenPaths(s.set)
	}
	s.uid, s.gid = hostIDs(s.set.UIDBase)
}

// openFiles makes the control socket, opens the helper and prepares the
// workspace: a tmpfs the init mounts, or a directory of the sandbox's
// record owned by its root.
func (s *nsStart) openFiles(entryDir string) error {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socketpair: %w", err)
	}
	parent := os.NewFile(uintptr(fds[0]), "sandbox-ctl")
	s.child = os.NewFile(uintptr(fds[1]), "sandbox-ctl-child")
	s.files = append(s.files, s.child)
	s.conn, err = net.FileConn(parent)
	parent.Close()
	if err != nil {
		s.conn = nil
		return fmt.Errorf("control socket: %w", err)
	}
	// The init is executed through an fd: after switching to the sandbox's
	// uid it may not be able to reach the binary's directory by path.
	exefd, err := unix.Open(s.set.helper, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open helper %s: %w", s.set.helper, err)
	}
	s.exe = os.NewFile(uintptr(exefd), s.set.helper)
	s.files = append(s.files, s.exe)
	s.extra = []*os.File{s.child, s.exe}
	if s.set.Workspace == "tmpfs" {
		s.setup.WorkspaceBytes = orDefault(s.spec.Limits.DiskBytes, defaultDiskBytes)
		return nil
	}
	ws := filepath.Join(entryDir, "workspace")
	if err := os.Mkdir(ws, 0o700); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	if err := os.Chown(ws, s.uid, s.gid); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	// Bound by path from inside: a mount from the parent's namespace (an
	// inherited fd) cannot be bind-mounted there.
	s.setup.WorkspaceDir = ws
	return nil
}

// makeCgroups makes the sandbox's cgroups, unless a slot made them ahead
// or cgroups are off.
func (s *nsStart) makeCgroups(cgr *cgroupRoot) error {
	if s.cg != nil || cgr.kind == cgroupOff {
		return nil
	}
	var err error
	s.cg, err = shapeOf(s.spec.Limits).create(cgr, s.id)
	return err
}

// openCgroupFiles gives the init its way into the commands' cgroup, which
// only its spawner thread (v1) or its commands (v2) take, and opens the
// v2 cgroup the init is born in.
func (s *nsStart) openCgroupFiles() error {
	if s.cg == nil {
		return nil
	}
	files, err := s.cg.commandFiles()
	if err != nil {
		return err
	}
	for _, f := range files {
		s.files = append(s.files, f)
		fd := 3 + len(s.extra)
		s.extra = append(s.extra, f)
		if s.cg.Kind == cgroupV2 {
			s.setup.CgroupProcsFD = fd
		} else {
			s.setup.CgroupTaskFDs = append(s.setup.CgroupTaskFDs, fd)
		}
	}
	if s.cg.Kind == cgroupV2 {
		if s.cgDir, err = os.Open(filepath.Join(s.cg.Dirs[""], cgroupInit)); err != nil {
			return fmt.Errorf("open cgroup: %w", err)
		}
		s.files = append(s.files, s.cgDir)
	}
	return nil
}

// launch starts the init, through the launcher l or directly, hands it
// its files (closing this process's copies) and returns its handle.
func (s *nsStart) launch(ctx context.Context, l *launcher, cgr *cgroupRoot) (*nsBox, error) {
	var (
		pid   int
		pidfd *os.File
		cmd   *exec.Cmd
		err   error
	)
	if l != nil {
		files := append([]*os.File{s.child}, s.extra[2:]...)
		req := sandboxinit.LaunchRequest{UID: s.uid, GID: s.gid, Network: s.spec.Network, ID: s.id}
		if s.cg != nil && s.cg.Kind == cgroupV1 {
			join, home, err := s.cg.forkerFiles(cgr)
			if err != nil {
				return nil, err
			}
			for i, f := range join {
				s.files = append(s.files, f, home[i])
				req.JoinFDs = append(req.JoinFDs, len(files))
				files = append(files, f)
				req.HomeFDs = append(req.HomeFDs, len(files))
				files = append(files, home[i])
			}
			s.bornInCgroup = true
		}
		if pid, pidfd, err = l.launch(ctx, req, files, s.cgDir); err != nil {
			return nil, fmt.Errorf("launch init: %w", err)
		}
	} else {
		if cmd, err = startInitDirect(s.set, s.spec, s.id, s.uid, s.gid, s.extra, s.cgDir); err != nil {
			return nil, fmt.Errorf("start init %s: %w (%s)", s.set.helper, err, nsHint(err))
		}
		pid = cmd.Process.Pid
	}
	// Only the init may hold its end now, so its exit reads as EOF here.
	s.child.Close()
	s.exe.Close()
	for _, f := range s.extra[2:] {
		f.Close()
	}
	nb := &nsBox{isolation: s.setup.Isolation, pid: pid, uid: s.uid, pidfd: pidfd, conn: s.conn, cg: s.cg,
		pending: map[uint64]chan sandboxinit.Response{}, dead: make(chan struct{}), exited: make(chan struct{})}
	if cmd != nil {
		go func() { cmd.Wait(); close(nb.exited) }()
	} else {
		go func() { waitPidfd(pidfd); close(nb.exited) }()
	}
	return nb, nil
}

// joinCgroup moves an init started outside its cgroups (v1, not forked
// into them) into them.
func (s *nsStart) joinCgroup(nb *nsBox) error {
	if s.cg == nil || s.cg.Kind != cgroupV1 || s.bornInCgroup {
		return nil
	}
	if err := s.cg.addProc(nb.pid); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return initExited(s.set.helper)
		}
		return err
	}
	return nil
}

// handshake waits for the init's answer to the Setup it was sent: the
// sandbox is built, or why not.
func (nb *nsBox) handshake(ctx context.Context, helper string) (sandboxinit.Response, error) {
	deadline := time.Now().Add(30 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	nb.conn.SetDeadline(deadline)
	nb.in = bufio.NewReaderSize(nb.conn, 64<<10)
	ready, err := sandboxinit.ReadResponse(nb.in)
	if err != nil {
		// Reset: the init exited with the Setup unread.
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
			err = initExited(helper)
		}
		return ready, fmt.Errorf("init did not come up: %w", err)
	}
	nb.conn.SetDeadline(time.Time{})
	return ready, nil
}

// startInitDirect forks the init from this process.
func startInitDirect(set *settings, spec core.SandboxSpec, id string, uid, gid int, extra []*os.File, cgDir *os.File) (*exec.Cmd, error) {
	flags := uintptr(syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS)
	if !spec.Network {
		flags |= syscall.CLONE_NEWNET
	}
	cmd := &exec.Cmd{
		Path:       "/proc/self/fd/4",
		Args:       []string{set.helper, "rlhost-sandbox-init", id},
		Env:        []string{sandboxinit.RoleEnv + "=init"},
		Dir:        "/",
		Stderr:     os.Stderr,
		ExtraFiles: extra,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:                 flags,
			UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}},
			GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}},
			GidMappingsEnableSetgroups: false,
			Credential:                 &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true},
			// If this process dies, so does the init, and with it its PID namespace.
			Pdeathsig: syscall.SIGKILL,
			Setsid:    true,
		},
	}
	if cgDir != nil {
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(cgDir.Fd())
	}
	return cmd, cmd.Start()
}

// waitPidfd blocks until the process of pidfd has exited; for a PID
// namespace's init that is after every other process in it is gone.
func waitPidfd(pidfd *os.File) {
	fds := []unix.PollFd{{Fd: int32(pidfd.Fd()), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); err != unix.EINTR {
			return
		}
	}
}

func nsHint(err error) string {
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSPC) {
		return "user namespaces look unavailable: check user.max_user_namespaces, kernel.unprivileged_userns_clone and AppArmor's restrict_unprivileged_userns, or set isolation = \"none\" for trusted code"
	}
	return "see docs/local-sandbox.md"
}

// checkNamespaces fails early, naming the kernel feature, where user
// namespaces are switched off.
func checkNamespaces() error {
	if b, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err == nil && string(b) == "0\n" {
		return fmt.Errorf("user namespaces are disabled (user.max_user_namespaces = 0); enable them, or set isolation = \"none\" to run trusted code without isolation: %w", core.ErrUnavailable)
	}
	if os.Geteuid() != 0 {
		if b, err := os.ReadFile("/proc/sys/kernel/unprivileged_userns_clone"); err == nil && string(b) == "0\n" {
			return fmt.Errorf("unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone = 0); enable them, run as root, or set isolation = \"none\" for trusted code: %w", core.ErrUnavailable)
		}
	}
	if _, err := os.Stat("/proc/self/ns/user"); err != nil {
		return fmt.Errorf("kernel lacks user namespaces (CONFIG_USER_NS): %w", core.ErrUnavailable)
	}
	return nil
}

// markDead records that the init is gone (under nb.mu): every waiting and
// later call fails with an error wrapping ErrUnavailable.
func (nb *nsBox) markDead(err error) {
	select {
	case <-nb.dead:
	default:
		nb.deadErr = fmt.Errorf("sandbox init exited: %v: %w", err, core.ErrUnavailable)
		close(nb.dead)
	}
}

func (nb *nsBox) alive() bool {
	select {
	case <-nb.dead:
		return false
	case <-nb.exited:
		// Gone while no call was reading its socket.
		return false
	default:
		return true
	}
}

// readResponses reads responses and hands each to its caller until the one
// for id (0: none) has come and none is pending, or the socket fails. The
// goroutine that runs it holds nb.reading.
func (nb *nsBox) readResponses(id uint64) (sandboxinit.Response, bool) {
	for {
		r, err := sandboxinit.ReadResponse(nb.in)
		nb.mu.Lock()
		if err != nil {
			nb.reading = false
			nb.markDead(err)
			nb.mu.Unlock()
			return sandboxinit.Response{}, false
		}
		mine := id != 0 && r.ID == id
		if ch := nb.pending[r.ID]; ch != nil {
			delete(nb.pending, r.ID)
			if !mine {
				ch <- r
			}
		}
		if mine || (id == 0 && len(nb.pending) == 0) {
			if len(nb.pending) > 0 {
				// Others still wait, each on its channel: keep reading for them.
				go nb.readResponses(0)
			} else {
				nb.reading = false
			}
			nb.mu.Unlock()
			return r, mine
		}
		nb.mu.Unlock()
	}
}

// call sends one request and waits for its response. The caller reads the
// socket itself when no other goroutine does (the usual case, one call at a
// time), so the response wakes it directly rather than through a reader
// goroutine and a channel; responses for other calls it meets are handed
// to them. When ctx ends first, the init is told to cancel, and the
// (prompt) response is still awaited.
func (nb *nsBox) call(ctx context.Context, req sandboxinit.Request) (sandboxinit.Response, error) {
	if err := ctx.Err(); err != nil {
		return sandboxinit.Response{}, fmt.Errorf("%s: %w", req.Op, err)
	}
	nb.mu.Lock()
	select {
	case <-nb.exited:
		nb.markDead(errors.New("reaped"))
	default:
	}
	select {
	case <-nb.dead:
		err := nb.deadErr
		nb.mu.Unlock()
		return sandboxinit.Response{}, err
	default:
	}
	nb.nextID++
	req.ID = nb.nextID
	ch := make(chan sandboxinit.Response, 1)
	nb.pending[req.ID] = ch
	nb.mu.Unlock()

	nb.wmu.Lock()
	err := sandboxinit.WriteRequest(nb.conn, &req)
	nb.wmu.Unlock()
	if err != nil {
		nb.mu.Lock()
		delete(nb.pending, req.ID)
		nb.mu.Unlock()
		return sandboxinit.Response{}, fmt.Errorf("send %s: %w", req.Op, err)
	}
	stop := context.AfterFunc(ctx, func() {
		nb.wmu.Lock()
		sandboxinit.WriteRequest(nb.conn, &sandboxinit.Request{ID: req.ID, Op: "cancel"})
		nb.wmu.Unlock()
	})
	defer stop()
	nb.mu.Lock()
	if !nb.reading && len(ch) == 0 {
		select {
		case <-nb.dead:
		default:
			nb.reading = true
			nb.mu.Unlock()
			if r, ok := nb.readResponses(req.ID); ok {
				return answer(r)
			}
			nb.mu.Lock()
		}
	}
	nb.mu.Unlock()
	select {
	case r := <-ch:
		return answer(r)
	case <-nb.dead:
		return sandboxinit.Response{}, nb.deadErr
	}
}

func answer(r sandboxinit.Response) (sandboxinit.Response, error) {
	if r.Err != "" {
		return r, sandboxinit.KindErr(r.ErrKind, r.Err)
	}
	return r, nil
}

func (nb *nsBox) exec(ctx context.Context, s sandboxinit.ExecSpec) (core.ExecResult, error) {
	var oom0, pids0 uint64
	if nb.cg != nil {
		oom0, pids0 = nb.cg.counters()
	}
	r, err := nb.call(ctx, sandboxinit.Request{Op: "exec", Exec: &s})
	if err != nil {
		return core.ExecResult{Isolation: nb.isolation}, err
	}
	if r.Exec == nil {
		return core.ExecResult{Isolation: nb.isolation}, errors.New("exec: init sent no result")
	}
	res := *r.Exec
	if nb.cg != nil {
		oom1, pids1 := nb.cg.counters()
		res.OOMKilled = oom1 > oom0
		res.PidsExceeded = pids1 > pids0
	}
	if res.PidsExceeded && r.Pgid > 0 {
		// A command that ran the sandbox out of pids (a fork bomb) has its
		// process group killed when it ends, or the sandbox stays unusable.
		nb.call(context.Background(), sandboxinit.Request{Op: "killpg", Pgid: r.Pgid})
	}
	if ctx.Err() != nil && !res.TimedOut {
		return res, fmt.Errorf("exec: %w", ctx.Err())
	}
	return res, nil
}

func (nb *nsBox) readFile(ctx context.Context, p string, max int64) ([]byte, error) {
	r, err := nb.call(ctx, sandboxinit.Request{Op: "read", Path: p, Max: max})
	return r.Data, err
}

func (nb *nsBox) writeFile(ctx context.Context, p string, data []byte, mode uint32, max int64) error {
	_, err := nb.call(ctx, sandboxinit.Request{Op: "write", Path: p, Data: data, Mode: mode, Max: max})
	return err
}

func (nb *nsBox) list(ctx context.Context, p string) ([]core.FileInfo, error) {
	r, err := nb.call(ctx, sandboxinit.Request{Op: "list", Path: p})
	return r.Files, err
}

// stop kills the init (its PID namespace dies with it, and with that every
// mount of the sandbox), then empties and removes the cgroup.
func (nb *nsBox) stop() error {
	if nb.pidfd != nil {
		// Not a child of this process: its pid may be reused once the
		// launcher reaps it, its pidfd never.
		unix.PidfdSendSignal(int(nb.pidfd.Fd()), syscall.SIGKILL, nil, 0)
	} else {
		syscall.Kill(nb.pid, syscall.SIGKILL)
	}
	nb.conn.Close()
	var err error
	// The init is reaped only after the kernel has killed and collected
	// every other process of its PID namespace, so after this the cgroup
	// is normally empty and removing it does not have to retry.
	select {
	case <-nb.exited:
		if nb.pidfd != nil {
			nb.pidfd.Close()
		}
	case <-time.After(5 * time.Second):
		err = fmt.Errorf("sandbox init %d did not exit", nb.pid)
	}
	if nb.cg != nil {
		err = errors.Join(err, nb.cg.destroy())
	}
	return err
}

// initExited explains an init that died before it was ready. It prints
// why on stderr; the usual cause is a helper binary left from another
// build, whose sandbox protocol differs.
func initExited(helper string) error {
	return fmt.Errorf("the sandbox init %s exited during start-up (its message is above; a helper from another rlhost build cannot serve this one: rebuild it with `make build`)", helper)
}
