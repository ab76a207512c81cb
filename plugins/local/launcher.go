package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/plugins/local/sandboxinit"
)

// launcherEnv, set to "off", makes the backend start every init itself
// (the path taken anyway where the launcher cannot run: without root).
const launcherEnv = "RLHOST_LOCAL_LAUNCHER"

// launcher is the backend's handle on its launcher process (see
// sandboxinit's launcher.go): it starts inits on request, each with the
// template root view as its working directory.
type launcher struct {
	dir  string // the template's mount point (in the launcher's namespace)
	cmd  *exec.Cmd
	dead chan struct{} // closed once the launcher is reaped

	mu   sync.Mutex // one request at a time
	conn *net.UnixConn
}

// useLauncher reports whether sandboxes of these settings start through a
// launcher: it needs root (a mount namespace of its own without a user
// namespace, so its template can be copied into each sandbox's) and a
// root view shared by every sandbox of the block.
func useLauncher(set *settings) bool {
	return set.Isolation == "namespaces" && os.Geteuid() == 0 && os.Getenv(launcherEnv) != "off"
}

// templateSetup is the part of every sandbox's setup the launcher builds
// once.
func templateSetup(set *settings) sandboxinit.Setup {
	var s sandboxinit.Setup
	set.rootFor(&s, "")
	s.Hide = hiddenPaths(set)
	return s
}

// hiddenPaths are the host paths covered in every root view: the state dir
// (every sandbox's record and workspace).
func hiddenPaths(set *settings) []string {
	hide := []string{filepath.Join(set.stateDir, "sandboxes")}
	if sd, err := filepath.Abs(set.stateDir); err == nil {
		hide = append(hide, sd)
	}
	return hide
}

// launcherSlot holds a backend's launcher, started on first use and again
// after it died; failed says why one could not start (then inits are
// started directly until the next Configure, and rlhost says so once).
type launcherSlot struct {
	mu     sync.Mutex
	l      *launcher
	closed bool
	failed error
}

// get returns a live launcher, or nil when inits must be started directly.
func (ls *launcherSlot) get(ctx context.Context, set *settings) *launcher {
	if !useLauncher(set) {
		return nil
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.closed || ls.failed != nil {
		return nil
	}
	if ls.l != nil && ls.l.alive() {
		return ls.l
	}
	if ls.l != nil {
		ls.l.close()
		ls.l = nil
	}
	l, err := startLauncher(ctx, set)
	if err != nil {
		ls.failed = err
		fmt.Fprintf(os.Stderr, "rlhost local backend: %v; starting sandbox inits directly (slower cold starts)\n", err)
		return nil
	}
	ls.l = l
	return l
}

// reset stops the launcher, if any, so the next get starts one with the
// current settings.
func (ls *launcherSlot) reset() {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.failed = nil
	if ls.l != nil {
		ls.l.close()
		ls.l = nil
	}
}

// close stops the launcher for good.
func (ls *launcherSlot) close() {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.closed = true
	if ls.l != nil {
		ls.l.close()
		ls.l = nil
	}
}

// startLauncher starts a launcher in a mount namespace of its own and
// waits until its template is built.
func startLauncher(ctx context.Context, set *settings) (*launcher, error) {
	dir, err := filepath.Abs(filepath.Join(set.stateDir, "launcher"))
	if err != nil {
		return nil, fmt.Errorf("launcher: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("launcher: %w", err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("launcher: socketpair: %w", err)
	}
	parent, child := os.NewFile(uintptr(fds[0]), "launcher-ctl"), os.NewFile(uintptr(fds[1]), "launcher-ctl-child")
	defer child.Close()
	fc, err := net.FileConn(parent)
	parent.Close()
	if err != nil {
		return nil, fmt.Errorf("launcher: control socket: %w", err)
	}
	conn := fc.(*net.UnixConn)
	exefd, err := unix.Open(set.helper, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("launcher: open helper %s: %w", set.helper, err)
	}
	exe := os.NewFile(uintptr(exefd), set.helper)
	defer exe.Close()
	cmd := &exec.Cmd{
		Path:       "/proc/self/fd/4",
		Args:       []string{set.helper, "rlhost-sandbox-launcher"},
		Env:        []string{sandboxinit.RoleEnv + "=" + sandboxinit.LauncherRole},
		Dir:        "/",
		Stderr:     os.Stderr,
		ExtraFiles: []*os.File{child, exe},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: syscall.CLONE_NEWNS,
			// If this process dies, so does the launcher, and with it
			// every init it started.
			Pdeathsig: syscall.SIGKILL,
			Setsid:    true,
		},
	}
	l := &launcher{dir: dir, cmd: cmd, conn: conn, dead: make(chan struct{})}
	// PR_SET_PDEATHSIG fires when the thread that forked exits, not the
	// process, and the launcher takes every sandbox with it: fork from a
	// locked thread that stays until the launcher is reaped.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := cmd.Start()
		started <- err
		if err == nil {
			cmd.Wait()
		}
		close(l.dead)
	}()
	if err := <-started; err != nil {
		conn.Close()
		return nil, fmt.Errorf("launcher: start %s: %w", set.helper, err)
	}
	child.Close()
	// Any uid of the range reads as well as another: none owns host files.
	setup := sandboxinit.LauncherSetup{Proto: sandboxinit.ProtocolVersion, Root: templateSetup(set), Dir: dir,
		ReadUID: int(set.UIDBase), ReadGID: int(set.UIDBase), Trace: os.Getenv("RLHOST_LOCAL_TRACE") != ""}
	var reply sandboxinit.LaunchReply
	if _, err := l.roundTrip(ctx, setup, nil, &reply); err != nil {
		l.close()
		return nil, fmt.Errorf("launcher: setup: %w", err)
	}
	if reply.Err != "" {
		l.close()
		return nil, fmt.Errorf("launcher: %s", reply.Err)
	}
	return l, nil
}

// roundTrip sends one message with files and reads the answer into reply,
// returning the fds that came with it.
func (l *launcher) roundTrip(ctx context.Context, msg any, files []*os.File, reply any) ([]int, error) {
	b, err := json.Marshal(msg)
	if err != nil {
		return nil, err
	}
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	l.conn.SetDeadline(deadline)
	defer l.conn.SetDeadline(time.Time{})
	if _, _, err := l.conn.WriteMsgUnix(b, oob, nil); err != nil {
		return nil, l.deadErr(err)
	}
	buf := make([]byte, 4096)
	rb := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, flags, _, err := l.conn.ReadMsgUnix(buf, rb)
	if err != nil {
		return nil, l.deadErr(err)
	}
	fds, ferr := sandboxinit.ParseRights(rb[:oobn])
	if n == 0 || flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || ferr != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, l.deadErr(fmt.Errorf("bad reply (%d bytes, flags %#x, %v)", n, flags, ferr))
	}
	if err := json.Unmarshal(buf[:n], reply); err != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, fmt.Errorf("decode launcher reply: %w", err)
	}
	return fds, nil
}

func (l *launcher) deadErr(err error) error {
	if !l.alive() {
		return fmt.Errorf("launcher exited: %v: %w", err, core.ErrUnavailable)
	}
	return err
}

func (l *launcher) alive() bool {
	select {
	case <-l.dead:
		return false
	default:
		return true
	}
}

// launch starts one init. files are its control socket end, then the
// files it gets as fds 5, 6, ...; cgroupDir, if not nil, is the cgroup v2
// directory it starts in. It returns the init's pid and a pidfd of it.
func (l *launcher) launch(ctx context.Context, req sandboxinit.LaunchRequest, files []*os.File, cgroupDir *os.File) (int, *os.File, error) {
	if cgroupDir != nil {
		files = append(files[:len(files):len(files)], cgroupDir)
		req.CgroupFD = len(files) - 1
	}
	var reply sandboxinit.LaunchReply
	fds, err := l.roundTrip(ctx, req, files, &reply)
	if err != nil {
		return 0, nil, err
	}
	if reply.Err != "" {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return 0, nil, errors.New(reply.Err)
	}
	if len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		if reply.PID > 0 {
			syscall.Kill(reply.PID, syscall.SIGKILL)
		}
		return 0, nil, fmt.Errorf("launcher sent %d fds with pid %d, want its pidfd", len(fds), reply.PID)
	}
	return reply.PID, os.NewFile(uintptr(fds[0]), "pidfd"), nil
}

// close stops the launcher; inits it started and that still run die with
// it. Closing its socket first lets it reap the inits that have exited and
// exit by itself; it is killed if it has not within closeGrace.
func (l *launcher) close() {
	l.conn.Close()
	select {
	case <-l.dead:
	case <-time.After(closeGrace):
		l.cmd.Process.Kill()
		<-l.dead
	}
}

// closeGrace bounds how long a launcher may take to reap and exit.
const closeGrace = time.Second
