package sandboxinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The launcher is a small long-lived process, one per backend, that starts
// sandbox inits on request. It exists for two reasons:
//
//   - Go forks a child in new user namespaces with a full fork (no vfork
//     with CLONE_NEWUSER), which costs more the more memory the parent
//     maps; the launcher maps a few MiB, the backend's process far more.
//   - It lives in a private mount namespace holding the template: the
//     read-only part of the root view shared by every sandbox (the runtime
//     binds, /etc, /dev), built once. An init cloned from it gets a copy of
//     that tree from the kernel with its mount namespace, and mounts only
//     its own /proc, /tmp, /run, /dev/shm and /workspace.
//
// Clean-up: the launcher is started with PR_SET_PDEATHSIG from the backend
// and starts every init with PR_SET_PDEATHSIG from one thread that never
// exits, so the death of the backend's process (kill -9 included) kills
// the launcher, and that kills every init and with it its PID namespace.
// The launcher reaps the inits; the backend learns of an init's exit from
// its pidfd, which the launcher passes back.

// LauncherRole is the RoleEnv value that makes a re-executed binary a
// launcher.
const LauncherRole = "launcher"

// MaxLauncherMessage bounds one launcher message (a LauncherSetup is the
// largest: the list of binds, links and generated files).
const MaxLauncherMessage = 1 << 20

func launcherMain() error {
	// fd 3 is the socket to the backend, fd 4 the binary inits are
	// executed through; neither may leak into an init (ForkExec passes fd
	// 4 on explicitly), nor anything else inherited.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fmt.Errorf("close-on-exec: %w", err)
	}
	const ctl = 3
	buf := make([]byte, MaxLauncherMessage)
	var setup LauncherSetup
	if _, err := recvLauncher(ctl, buf, &setup); err != nil {
		return fmt.Errorf("read launcher setup: %w", err)
	}
	reply := func(err error) error {
		r := LaunchReply{}
		if err != nil {
			r.Err = err.Error()
		}
		return sendLauncher(ctl, r, nil)
	}
	if setup.Proto != ProtocolVersion {
		err := fmt.Errorf("helper speaks sandbox protocol %d, the backend %d: rebuild the helper binary", ProtocolVersion, setup.Proto)
		reply(err)
		return err
	}
	if err := buildTemplate(setup); err != nil {
		reply(err)
		return err
	}
	// Inits inherit this working directory: in their cloned mount
	// namespace it is their copy of the template.
	if err := unix.Chdir(setup.Dir); err != nil {
		reply(err)
		return fmt.Errorf("chdir template %s: %w", setup.Dir, err)
	}
	reapChildren()
	// Every fork runs on this thread, the one that also waits for the
	// requests in recvmsg(2): an init's parent-death signal fires when the
	// thread that forked it exits, not the process, and this one exits only
	// with the process. Forking where the request was read also spares two
	// hand-offs between threads per launch (to a forking thread and back),
	// each a wake-up of a parked thread.
	runtime.LockOSThread()
	nets, err := newPreparedNet()
	if err != nil {
		reply(err)
		return err
	}
	netFailure := func(err error) {
		if err != nil {
			fmt.Fprintf(os.Stderr, "rlhost sandbox launcher: %v; sandboxes make their own meanwhile, which makes a create about a millisecond slower\n", err)
		}
	}
	netFailure(nets.prepare())
	if err := reply(nil); err != nil {
		return fmt.Errorf("send ready: %w", err)
	}
	// Set once the forker thread is stuck in a sandbox's cgroups: it may
	// not fork again (an init would be born in the wrong cgroups), nor
	// exit (its inits' parent-death signal would fire), so the sandboxes
	// it started keep running and every later launch fails with this.
	var stuck error
	for {
		var req LaunchRequest
		fds, err := recvLauncher(ctl, buf[:4096], &req)
		if err != nil {
			// The backend is gone, or closed us at its shutdown, after
			// stopping every init: reap those that have exited before
			// exiting, or they would be left as zombies of whatever
			// process adopts them (in a container, often one that never
			// reaps). Any still running die with the launcher.
			reapExited()
			return nil
		}
		var pid, pidfd int
		if stuck == nil {
			pid, pidfd, err = launchInit(req, fds, nets)
			if errors.Is(err, errForkerStuck) {
				stuck = err
			}
		} else {
			err = stuck
		}
		for _, fd := range fds {
			unix.Close(fd)
		}
		var serr error
		if err != nil {
			serr = sendLauncher(ctl, LaunchReply{Err: err.Error()}, nil)
		} else {
			serr = sendLauncher(ctl, LaunchReply{PID: pid}, []int{pidfd})
			unix.Close(pidfd)
		}
		if serr != nil {
			return nil
		}
		// The next sandbox's network namespace, made while this one's
		// init starts up (and after a failed launch, which may have spent
		// the last one).
		netFailure(nets.prepare())
	}
}

// reapExited reaps every child that has exited, without waiting for the
// others.
func reapExited() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}

// reapChildren reaps every exited init (the backend watches them through
// pidfds, which outlive the reaping).
func reapChildren() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGCHLD)
	go func() {
		for range sig {
			reapExited()
		}
	}()
}

// launchInit starts one init: in new user, mount (a copy of the
// launcher's, template included), PID, IPC, UTS and (unless Network)
// network namespaces, as uid 0 mapped to req.UID.
func launchInit(req LaunchRequest, fds []int, nets *preparedNet) (pid, pidfd int, err error) {
	if len(fds) == 0 {
		return 0, 0, errors.New("launch: no control socket")
	}
	files := []uintptr{0, 1, 2, uintptr(fds[0]), 4}
	cgfd := -1
	special := map[int]bool{req.CgroupFD: req.CgroupFD > 0}
	var join, home []int
	for _, set := range []struct {
		idx  []int
		into *[]int
	}{{req.JoinFDs, &join}, {req.HomeFDs, &home}} {
		for _, i := range set.idx {
			if i <= 0 || i >= len(fds) || special[i] {
				return 0, 0, fmt.Errorf("launch: bad cgroup fd index %d", i)
			}
			special[i] = true
			*set.into = append(*set.into, fds[i])
		}
	}
	if len(join) != len(home) {
		return 0, 0, fmt.Errorf("launch: %d cgroups to join but %d to return to", len(join), len(home))
	}
	for i, fd := range fds[1:] {
		if req.CgroupFD == i+1 {
			cgfd = fd
			continue
		}
		if !special[i+1] {
			files = append(files, uintptr(fd))
		}
	}
	flags := uintptr(unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS)
	newNet, prepared, err := nets.take(req.Network)
	if err != nil {
		return 0, 0, fmt.Errorf("start init: %w", err)
	}
	env := []string{RoleEnv + "=init"}
	if newNet {
		flags |= unix.CLONE_NEWNET
	}
	if prepared {
		env = append(env, NetEnv+"="+NetPrepared)
	}
	pidfd = -1
	sys := &syscall.SysProcAttr{
		Cloneflags:                 flags,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: req.UID, Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: req.GID, Size: 1}},
		GidMappingsEnableSetgroups: false,
		Credential:                 &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true},
		Pdeathsig:                  syscall.SIGKILL,
		Setsid:                     true,
		PidFD:                      &pidfd,
	}
	if cgfd >= 0 {
		sys.UseCgroupFD, sys.CgroupFD = true, cgfd
	}
	// On the forker thread (this runs on it): the child takes the cgroups
	// of the thread that forks it.
	if err := moveThread(join); err != nil {
		if herr := moveThread(home); herr != nil {
			return 0, 0, fmt.Errorf("%w: %w", errForkerStuck, herr)
		}
		return 0, 0, fmt.Errorf("start init: join its cgroups: %w", err)
	}
	pid, err = syscall.ForkExec("/proc/self/fd/4", []string{"rlhost-sandbox-init", req.ID}, &syscall.ProcAttr{
		Env:   env,
		Files: files,
		Sys:   sys,
	})
	if herr := moveThread(home); herr != nil {
		if err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		return 0, 0, fmt.Errorf("%w: %w", errForkerStuck, herr)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("start init: %w", err)
	}
	if pidfd < 0 {
		// A kernel without pidfds (before 5.3) cannot be watched safely.
		syscall.Kill(pid, syscall.SIGKILL)
		return 0, 0, errors.New("start init: the kernel returned no pidfd (Linux 5.3+ needed)")
	}
	return pid, pidfd, nil
}

// errForkerStuck means the forker thread could not leave a sandbox's
// cgroups; the launcher then refuses every later launch.
var errForkerStuck = errors.New("launcher: the forking thread cannot return to its own cgroups")

// moveThread moves the calling thread, alone, into the cgroups whose
// tasks files are fds ("0" names the writer, and a thread moving itself
// needs no lock on its whole process).
func moveThread(fds []int) error {
	for _, fd := range fds {
		if _, err := unix.Pwrite(fd, []byte("0"), 0); err != nil {
			return fmt.Errorf("write tasks: %w", err)
		}
	}
	return nil
}

// buildTemplate builds the shared root view at setup.Dir in this process's
// own mount namespace, which the backend created for it. The namespace
// stays a slave of the host's, so a later host mount (a mount source
// appearing) still reaches inits that build their own root; the template
// itself is private and read-only.
func buildTemplate(setup LauncherSetup) error {
	var tr *Tracer
	if setup.Trace {
		tr = &Tracer{what: "launcher template", start: time.Now(), last: time.Now()}
		defer tr.Done()
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("launcher: make mounts slaves: %w", err)
	}
	s := setup.Root
	src, err := openSourcesAs(s, setup.ReadUID, setup.ReadGID)
	if err != nil {
		return err
	}
	defer src.close()
	dir := setup.Dir
	if err := unix.Mount("rlhost-template", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=8m"); err != nil {
		return fmt.Errorf("launcher: mount template tmpfs on %s: %w", dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("launcher: make template private: %w", err)
	}
	if err := fillRoot(s, src, dir, tr); err != nil {
		return fmt.Errorf("launcher: %w", err)
	}
	if err := unix.Mount("", dir, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("launcher: make template read-only: %w", err)
	}
	return nil
}

// openSourcesAs opens the root view's sources with the file system ids of
// a sandbox (setfsuid and setfsgid are per thread, so the goroutine is
// locked to one for the length of it): the launcher runs as the backend's
// user, and a sandbox must see only what its own uid may read.
func openSourcesAs(s Setup, uid, gid int) (*rootSources, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if uid != unix.Getuid() {
		unix.Setfsgid(gid)
		unix.Setfsuid(uid)
		defer func() {
			unix.Setfsuid(unix.Getuid())
			unix.Setfsgid(unix.Getgid())
		}()
	}
	return openRootSources(s)
}

// sendLauncher sends v as one packet, with fds.
func sendLauncher(fd int, v any, fds []int) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > MaxLauncherMessage {
		return fmt.Errorf("launcher message of %d bytes exceeds %d", len(b), MaxLauncherMessage)
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	for {
		err = unix.Sendmsg(fd, b, oob, nil, 0)
		if err != unix.EINTR {
			return err
		}
	}
}

// recvLauncher receives one packet (at most len(buf) bytes) into v, and
// the fds that came with it.
func recvLauncher(fd int, buf []byte, v any) ([]int, error) {
	oob := make([]byte, unix.CmsgSpace(16*4))
	var n, oobn, flags int
	var err error
	for {
		n, oobn, flags, _, err = unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	fds, ferr := ParseRights(oob[:oobn])
	if n == 0 {
		closeAll(fds)
		return nil, errors.New("launcher socket closed")
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || ferr != nil {
		closeAll(fds)
		return nil, fmt.Errorf("launcher message truncated or malformed (%v)", ferr)
	}
	if err := json.Unmarshal(buf[:n], v); err != nil {
		closeAll(fds)
		return nil, fmt.Errorf("decode launcher message: %w", err)
	}
	return fds, nil
}

// ParseRights returns the fds of SCM_RIGHTS messages in oob.
func ParseRights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			closeAll(fds)
			return nil, err
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
