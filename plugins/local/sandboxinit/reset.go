package sandboxinit

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rlhost/rlhost/plugins/local/confine"
)

// resetTimeout bounds how long a reset waits for the sandbox's processes
// to die; the backend destroys a sandbox whose reset fails.
const resetTimeout = 2 * time.Second

// reset brings a sandbox back to the state of a fresh one, for the
// backend's recycle setting: every process but the init killed and reaped,
// empty /tmp, /run, /dev/shm and /workspace (new tmpfs mounts, not a
// deletion the old contents could race), no System V or POSIX IPC object
// and no key in the user's keyrings. Those are everything of a command
// that can outlive it: the root view is read-only, commands have no
// capabilities (so no mounts, hostname or network configuration), and
// sockets, locks and watches die with their processes.
//
// It runs on a thread of its own: the mounts need the capabilities that
// the spawner thread (which may be serving this request) has dropped.
func (srv *initServer) reset(deadline time.Time) error {
	done := make(chan error, 1)
	go func() { done <- srv.resetOn(deadline) }()
	return <-done
}

func (srv *initServer) resetOn(deadline time.Time) error {
	var tr *Tracer
	if srv.setup.Trace {
		tr = &Tracer{what: "init reset", start: time.Now(), last: time.Now()}
		defer tr.Done()
	}
	if err := killAllBut1(deadline, srv.reapOrphans); err != nil {
		return err
	}
	tr.Mark("kill")
	if srv.setup.WorkspaceBytes <= 0 {
		return errors.New("reset: the workspace is a host directory, which a reset cannot empty safely")
	}
	for _, m := range scratchMounts(srv.setup) {
		if err := unix.Unmount(m.dir, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("reset: unmount %s: %w", m.dir, err)
		}
		if err := m.mount(""); err != nil {
			return fmt.Errorf("reset: %w", err)
		}
	}
	tr.Mark("mounts")
	ws, err := confine.Open("/workspace", "/workspace")
	if err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	srv.wsMu.Lock()
	old := srv.ws
	srv.ws = ws
	srv.wsMu.Unlock()
	old.Close()
	if err := removeSysvIPC(); err != nil {
		return err
	}
	tr.Mark("sysv")
	if err := removeMqueues(); err != nil {
		return err
	}
	tr.Mark("mqueue")
	clearKeyrings()
	return nil
}

// killAllBut1 kills every process of the sandbox's PID namespace but this
// one, until /proc lists no other. kill(-1) from PID 1 reaches them all,
// nested namespaces included; it is repeated, since a process forked
// during one sweep may have been missed by it. reap collects the dead.
func killAllBut1(deadline time.Time, reap func() bool) error {
	for {
		unix.Kill(-1, unix.SIGKILL)
		reap()
		left, err := otherPids()
		if err != nil {
			return err
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("reset: %d processes still alive (%v)", len(left), left[:min(len(left), 8)])
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// otherPids lists the processes in this PID namespace other than PID 1,
// zombies included (the reaper has not collected them yet).
func otherPids() ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("reset: list /proc: %w", err)
	}
	var pids []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid != 1 {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// removeSysvIPC removes every shared memory segment, semaphore set and
// message queue of the sandbox's IPC namespace; they outlive the
// processes that made them.
func removeSysvIPC() error {
	for _, k := range []struct {
		file string
		rm   func(id int) error
	}{
		{"/proc/sysvipc/shm", func(id int) error { _, err := unix.SysvShmCtl(id, unix.IPC_RMID, nil); return err }},
		{"/proc/sysvipc/sem", func(id int) error {
			_, _, e := unix.Syscall6(unix.SYS_SEMCTL, uintptr(id), 0, unix.IPC_RMID, 0, 0, 0)
			return errnoErr(e)
		}},
		{"/proc/sysvipc/msg", func(id int) error {
			_, _, e := unix.Syscall(unix.SYS_MSGCTL, uintptr(id), unix.IPC_RMID, 0)
			return errnoErr(e)
		}},
	} {
		ids, err := sysvIDs(k.file)
		if err != nil {
			return err
		}
		for _, id := range ids {
			if err := k.rm(id); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.EIDRM) {
				return fmt.Errorf("reset: remove IPC object %d (%s): %w", id, k.file, err)
			}
		}
	}
	return nil
}

func errnoErr(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// sysvIDs reads the ids (second column) of a /proc/sysvipc table.
func sysvIDs(file string) ([]int, error) {
	f, err := os.Open(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil // a kernel without System V IPC
	}
	if err != nil {
		return nil, fmt.Errorf("reset: %w", err)
	}
	defer f.Close()
	var ids []int
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		if id, err := strconv.Atoi(fields[1]); err == nil {
			ids = append(ids, id)
		}
	}
	return ids, sc.Err()
}

// clearKeyrings empties the user keyrings of the sandbox's user, which
// outlive its processes (the host uid a sandbox maps to stays the same
// when it is recycled). The default seccomp filter denies commands the
// keyring calls; with seccomp = "off" this is what keeps them from passing
// keys on. Errors mean there is nothing to clear (no keyrings in the
// kernel, or none made).
func clearKeyrings() {
	for _, ring := range []int{unix.KEY_SPEC_USER_KEYRING, unix.KEY_SPEC_USER_SESSION_KEYRING} {
		unix.KeyctlInt(unix.KEYCTL_CLEAR, ring, 0, 0, 0)
	}
}

// removeMqueues unlinks every POSIX message queue of the sandbox's IPC
// namespace, through an mqueue file system mounted for the purpose on the
// fresh /run (nothing runs in the sandbox to see it) and removed again.
func removeMqueues() error {
	dir := "/run/.rlhost-mqueue"
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	defer os.Remove(dir)
	if err := unix.Mount("mqueue", dir, "mqueue", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		if errors.Is(err, unix.ENODEV) {
			return nil // a kernel without POSIX message queues
		}
		return fmt.Errorf("reset: mount mqueue: %w", err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("reset: list message queues: %w", err)
	}
	for _, e := range ents {
		if err := os.Remove(dir + "/" + e.Name()); err != nil {
			return fmt.Errorf("reset: remove message queue %s: %w", e.Name(), err)
		}
	}
	return nil
}
