package sandboxinit

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestForkExecAtStopsBeforeFirstInstruction: atExec runs once the new
// program is loaded (its /proc/pid/exe is the shell) while it is held in a
// tracing stop (state t) before doing anything (the file it writes does
// not exist yet), and what atExec sets reaches a child the program forks
// first thing.
func TestForkExecAtStopsBeforeFirstInstruction(t *testing.T) {
	runtime.LockOSThread() // the exec stop is reported to the forking thread
	defer runtime.UnlockOSThread()
	dir := t.TempDir()
	marker := filepath.Join(dir, "limits")
	var exe, state string
	ranEarly := true
	attr := &syscall.ProcAttr{Files: []uintptr{0, 1, 2}, Sys: &syscall.SysProcAttr{}}
	pid, died, err := ForkExecAt("/bin/sh", []string{"sh", "-c", "cat /proc/self/limits > " + marker}, attr, func(pid int) error {
		exe, _ = os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			if i := strings.LastIndexByte(string(st), ')'); i > 0 && len(st) > i+2 {
				state = string(st[i+2])
			}
		}
		_, statErr := os.Stat(marker)
		ranEarly = statErr == nil
		return unix.Prlimit(pid, unix.RLIMIT_CPU, &unix.Rlimit{Cur: 7, Max: 8}, nil)
	})
	if err != nil || died != nil {
		t.Fatalf("ForkExecAt: %v, died %v", err, died)
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil || !ws.Exited() || ws.ExitStatus() != 0 {
		t.Fatalf("wait: %v %v", err, ws)
	}
	if ranEarly || state != "t" {
		t.Errorf("the command was not held at its exec: ran %v, state %q (want t, traced stop)", ranEarly, state)
	}
	if sh, _ := filepath.EvalSymlinks("/bin/sh"); exe != sh {
		t.Errorf("at the stop /proc/pid/exe = %q, want %q: not yet exec'd", exe, sh)
	}
	limits, err := os.ReadFile(marker)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(limits), "Max cpu time              7                    8                    seconds") {
		t.Errorf("a child forked at once lacks the limit:\n%s", limits)
	}
}

// TestForkExecAtFailingHookKillsTheChild: when atExec fails, the command
// never runs and no process is left.
func TestForkExecAtFailingHookKillsTheChild(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	marker := filepath.Join(t.TempDir(), "ran")
	var child int
	attr := &syscall.ProcAttr{Files: []uintptr{0, 1, 2}, Sys: &syscall.SysProcAttr{}}
	_, _, err := ForkExecAt("/bin/sh", []string{"sh", "-c", "echo x > " + marker}, attr, func(pid int) error {
		child = pid
		return fmt.Errorf("no")
	})
	if err == nil {
		t.Fatal("ForkExecAt succeeded")
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("the command ran")
	}
	if err := syscall.Kill(child, 0); err != syscall.ESRCH {
		t.Errorf("child %d still exists: %v", child, err)
	}
}

// unread tells a pipe with bytes waiting from an empty one, without putting
// the reading end back into blocking mode (the drain relies on closing it to
// cut a read short).
func TestUnreadSeesPendingOutput(t *testing.T) {
	r, w, err := pipe(0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer unix.Close(w)
	if unread(r) {
		t.Fatal("an empty pipe reads as holding output")
	}
	if _, err := unix.Write(w, []byte("verdict\n")); err != nil {
		t.Fatal(err)
	}
	if !unread(r) {
		t.Fatal("a pipe holding 8 bytes reads as empty")
	}
	buf := make([]byte, 16)
	if n, err := r.Read(buf); err != nil || n != 8 {
		t.Fatalf("read = %d, %v", n, err)
	}
	if unread(r) {
		t.Fatal("a drained pipe reads as holding output")
	}
	rc, err := r.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	flags := 0
	rc.Control(func(fd uintptr) { flags, err = unix.FcntlInt(fd, unix.F_GETFL, 0) })
	if err != nil || flags&unix.O_NONBLOCK == 0 {
		t.Fatalf("reading end lost O_NONBLOCK: flags %#x, %v", flags, err)
	}
}
