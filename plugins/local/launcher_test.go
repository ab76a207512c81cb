package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rlhost/rlhost/core"
)

// launcherOf returns the backend's running launcher, or fails the test.
func launcherOf(t *testing.T, b *Backend) *launcher {
	t.Helper()
	b.launcher.mu.Lock()
	defer b.launcher.mu.Unlock()
	if b.launcher.l == nil || !b.launcher.l.alive() {
		t.Fatal("no launcher running: sandboxes were started directly")
	}
	return b.launcher.l
}

// The launcher is the parent of every init: its death (kill -9) must take
// every sandbox with it, and the backend must start a new one for the
// next sandbox.
func TestLauncherDeathKillsSandboxesAndIsReplaced(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: the launcher needs root (without it inits are started directly)")
	}
	b := newBackend(t, nil, core.SandboxSpec{})
	id := create(t, b, core.SandboxSpec{})
	execOK(t, b, id, sh("sleep 1000 >/dev/null 2>&1 &")...)
	b.mu.Lock()
	uid := b.boxes[id].impl.(*nsBox).uid
	b.mu.Unlock()
	if len(procsOfUID(uid)) < 2 {
		t.Fatalf("expected init and background process, got %v", procsOfUID(uid))
	}
	old := launcherOf(t, b)
	old.cmd.Process.Signal(syscall.SIGKILL)
	eventually(t, "the sandbox's processes gone with the launcher", func() bool { return len(procsOfUID(uid)) == 0 })
	_, err := b.Exec(context.Background(), id, core.ExecRequest{Command: []string{"true"}})
	if !errors.Is(err, core.ErrUnavailable) {
		t.Fatalf("Exec in a sandbox whose launcher died: %v, want ErrUnavailable", err)
	}
	if err := b.Destroy(context.Background(), id); err != nil {
		t.Fatalf("Destroy of the dead sandbox: %v", err)
	}
	id2 := create(t, b, core.SandboxSpec{})
	if r := execOK(t, b, id2, "cat", "/etc/hostname"); r.Stdout != "sandbox\n" {
		t.Fatalf("new sandbox: %q", r.Stdout)
	}
	if launcherOf(t, b) == old {
		t.Fatal("the dead launcher was reused")
	}
}

// A root view copied from the launcher's template must show what an init
// that builds its own shows, and be as read-only.
func TestTemplateRootMatchesDirect(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: the launcher needs root (without it inits are started directly)")
	}
	const probe = `ls -1A / /etc /dev /usr | md5sum; grep -c . /proc/self/mountinfo;
for p in / /etc/passwd /usr/bin /dev; do touch "$p" 2>/dev/null && echo "writable $p"; done;
umount /usr 2>/dev/null && echo "unmounted /usr"; mount -o remount,rw / 2>/dev/null && echo "remounted /"; true`
	out := map[string]string{}
	for _, mode := range []string{"launcher", "off"} {
		t.Run(mode, func(t *testing.T) {
			t.Setenv(launcherEnv, mode)
			b := newBackend(t, nil, core.SandboxSpec{})
			id := create(t, b, core.SandboxSpec{})
			if mode == "launcher" {
				launcherOf(t, b)
			}
			out[mode] = execOK(t, b, id, sh(probe)...).Stdout
			for _, bad := range []string{"writable", "unmounted", "remounted"} {
				if strings.Contains(out[mode], bad) {
					t.Errorf("root view not read-only and fixed:\n%s", out[mode])
				}
			}
		})
	}
	if out["launcher"] != out["off"] {
		t.Fatalf("template root differs from a directly built one:\nlauncher:\n%s\ndirect:\n%s", out["launcher"], out["off"])
	}
}

// Under cgroup v1 an init is born in its sandbox's cgroups (the launcher's
// forking thread visits them for the fork), and the launcher's threads
// all go back to the launcher's own cgroups, or the sandbox's could not
// be removed.
func TestLauncherInitBornInItsCgroups(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: the launcher needs root (without it inits are started directly)")
	}
	// Every create must start an init, not take a recycled sandbox.
	b := newBackend(t, map[string]any{"recycle": false}, core.SandboxSpec{})
	if b.cg.kind != cgroupV1 {
		t.Skip("SKIP: cgroup v1 only (v2 starts inits in their cgroup with CLONE_INTO_CGROUP)")
	}
	for i := 0; i < 3; i++ {
		id := create(t, b, core.SandboxSpec{})
		b.mu.Lock()
		nb := b.boxes[id].impl.(*nsBox)
		b.mu.Unlock()
		for ctrl, dir := range nb.cg.Dirs {
			procs, err := os.ReadFile(dir + "/cgroup.procs")
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(strings.Fields(string(procs)), strconv.Itoa(nb.pid)) {
				t.Errorf("%s: init %d not in %s (holds %q)", ctrl, nb.pid, dir, procs)
			}
		}
		l := launcherOf(t, b)
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", l.cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range tasks {
			cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/cgroup", l.cmd.Process.Pid, task.Name()))
			if err != nil {
				continue // the thread exited
			}
			if strings.Contains(string(cg), "rlhost-") {
				t.Errorf("launcher thread %s left in a sandbox's cgroup:\n%s", task.Name(), cg)
			}
		}
		if r := execOK(t, b, id, "cat", "/etc/hostname"); r.Stdout != "sandbox\n" {
			t.Fatalf("sandbox %d: %q", i, r.Stdout)
		}
		if err := b.Destroy(context.Background(), id); err != nil {
			t.Fatalf("Destroy: %v", err)
		}
		for ctrl, dir := range nb.cg.Dirs {
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s: cgroup %s left after Destroy (%v)", ctrl, dir, err)
			}
		}
	}
}

// The launcher makes each sandbox's network namespace ahead (see
// sandboxinit/netprep.go): every sandbox must still get one of its own,
// never the host's nor another sandbox's, with lo up; one that shares the
// host's network must get the host's, and the next private one its own
// again.
func TestLauncherGivesEachSandboxItsOwnNetwork(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: the launcher needs root (without it inits are started directly)")
	}
	host, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	var hostUserNS unix.Stat_t
	if err := unix.Stat("/proc/self/ns/user", &hostUserNS); err != nil {
		t.Fatal(err)
	}
	b := newBackend(t, nil, core.SandboxSpec{})
	const loUp = `readlink /proc/self/ns/net; python3 -c '
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
socket.create_connection(s.getsockname()).close(); print("lo up")'`
	seen := map[string]string{}
	for i, network := range []bool{false, false, true, false, false} {
		name := fmt.Sprintf("sandbox %d (network %v)", i, network)
		id := create(t, b, core.SandboxSpec{Network: network})
		launcherOf(t, b)
		out := strings.Fields(execOK(t, b, id, sh(loUp)...).Stdout)
		if len(out) != 3 || out[1]+" "+out[2] != "lo up" {
			t.Fatalf("%s: %q, want its namespace and lo up", name, out)
		}
		ns := out[0]
		switch {
		case network && ns != host:
			t.Errorf("%s is in %s, want the host's %s", name, ns, host)
		case !network && ns == host:
			t.Errorf("%s is in the host's network namespace %s", name, ns)
		case !network && seen[ns] != "":
			t.Errorf("%s shares network namespace %s with %s", name, ns, seen[ns])
		}
		seen[ns] = name
		// A private one was made ahead by the launcher, so it belongs to
		// the host's user namespace, not to the sandbox's.
		b.mu.Lock()
		pid := b.boxes[id].impl.(*nsBox).pid
		b.mu.Unlock()
		if owner, err := netNSOwner(pid); err != nil {
			t.Fatal(err)
		} else if !network && (owner.Dev != hostUserNS.Dev || owner.Ino != hostUserNS.Ino) {
			t.Errorf("%s: its network namespace was not made ahead (its owner is user namespace %d)", name, owner.Ino)
		}
	}
}

// netNSOwner stats the user namespace that owns pid's network namespace.
func netNSOwner(pid int) (unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/net", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return st, err
	}
	defer unix.Close(fd)
	owner, err := unix.IoctlRetInt(fd, unix.NS_GET_USERNS)
	if err != nil {
		return st, fmt.Errorf("NS_GET_USERNS: %w", err)
	}
	defer unix.Close(owner)
	return st, unix.Fstat(owner, &st)
}
