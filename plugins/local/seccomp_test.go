package local

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rlhost/rlhost/core"
)

// syscallProbes are Python statements that try one system call each with
// arguments that do no harm if it is allowed, and leave its errno (0 on
// success) in e. Numbers come from x/sys/unix, so they match this
// architecture.
var syscallProbes = map[string]string{
	"keyctl":            fmt.Sprintf("e = sc(%d, 0, -3, 0)", unix.SYS_KEYCTL), // KEYCTL_GET_KEYRING_ID, session keyring
	"add_key":           fmt.Sprintf("e = sc(%d, 0, 0, 0, 0, 0)", unix.SYS_ADD_KEY),
	"request_key":       fmt.Sprintf("e = sc(%d, 0, 0, 0, 0)", unix.SYS_REQUEST_KEY),
	"bpf":               fmt.Sprintf("e = sc(%d, 0, 0, 0)", unix.SYS_BPF),
	"perf_event_open":   fmt.Sprintf("e = sc(%d, 0, 0, -1, -1, 0)", unix.SYS_PERF_EVENT_OPEN),
	"userfaultfd":       fmt.Sprintf("e = sc(%d, 0o2000000 | 1)", unix.SYS_USERFAULTFD),
	"io_uring_setup":    fmt.Sprintf("e = sc(%d, 1, 0)", unix.SYS_IO_URING_SETUP),
	"io_uring_enter":    fmt.Sprintf("e = sc(%d, -1, 0, 0, 0, 0, 0)", unix.SYS_IO_URING_ENTER),
	"io_uring_register": fmt.Sprintf("e = sc(%d, -1, 0, 0, 0)", unix.SYS_IO_URING_REGISTER),
	"kexec_load":        fmt.Sprintf("e = sc(%d, 0, 0, 0, 0)", unix.SYS_KEXEC_LOAD),
	"kexec_file_load":   fmt.Sprintf("e = sc(%d, -1, -1, 0, 0, 0)", unix.SYS_KEXEC_FILE_LOAD),
	"mount":             fmt.Sprintf("e = sc(%d, 0, 0, 0, 0, 0)", unix.SYS_MOUNT),
	"umount2":           fmt.Sprintf("e = sc(%d, 0, 0)", unix.SYS_UMOUNT2),
	"pivot_root":        fmt.Sprintf("e = sc(%d, 0, 0)", unix.SYS_PIVOT_ROOT),
	"open_tree":         fmt.Sprintf("e = sc(%d, -1, 0, 0)", unix.SYS_OPEN_TREE),
	"fsopen":            fmt.Sprintf("e = sc(%d, 0, 0)", unix.SYS_FSOPEN),
	"move_mount":        fmt.Sprintf("e = sc(%d, -1, 0, -1, 0, 0)", unix.SYS_MOVE_MOUNT),
	"unshare":           fmt.Sprintf("e = sc(%d, %d)", unix.SYS_UNSHARE, unix.CLONE_NEWUSER),
	"setns":             fmt.Sprintf("e = sc(%d, -1, 0)", unix.SYS_SETNS),
	// A fork-like clone: a child that gets through exits at once.
	"clone":             fmt.Sprintf("e = sc(%d, %d, 0, 0, 0, 0, child_exits=True)", unix.SYS_CLONE, unix.CLONE_NEWUSER|int(unix.SIGCHLD)),
	"clone3":            fmt.Sprintf("e = sc(%d, 0, 0)", unix.SYS_CLONE3),
	"ptrace":            fmt.Sprintf("p = subprocess.Popen(['sleep', '5']); e = sc(%d, %d, p.pid, 0, 0); p.kill(); p.wait()", unix.SYS_PTRACE, unix.PTRACE_ATTACH),
	"init_module":       fmt.Sprintf("e = sc(%d, 0, 0, 0)", unix.SYS_INIT_MODULE),
	"finit_module":      fmt.Sprintf("e = sc(%d, -1, 0, 0)", unix.SYS_FINIT_MODULE),
	"delete_module":     fmt.Sprintf("e = sc(%d, 0, 0)", unix.SYS_DELETE_MODULE),
	"open_by_handle_at": fmt.Sprintf("e = sc(%d, -1, 0, 0)", unix.SYS_OPEN_BY_HANDLE_AT),
	"name_to_handle_at": fmt.Sprintf("e = sc(%d, -100, 0, 0, 0, 0)", unix.SYS_NAME_TO_HANDLE_AT),
	"reboot":            fmt.Sprintf("e = sc(%d, 0, 0, 0, 0)", unix.SYS_REBOOT),
	"swapon":            fmt.Sprintf("e = sc(%d, 0, 0)", unix.SYS_SWAPON),
	"swapoff":           fmt.Sprintf("e = sc(%d, 0)", unix.SYS_SWAPOFF),
}

const probePrelude = `import ctypes, os, subprocess
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sc(nr, *args, child_exits=False):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    if child_exits and r == 0:
        os._exit(0)
    if child_exits and r > 0:
        os.waitpid(r, 0)
    return ctypes.get_errno() if r == -1 else 0
`

// probeSyscalls runs the named probes in sandbox id and returns each one's
// errno (0: the call succeeded).
func probeSyscalls(t *testing.T, b *Backend, id string, names ...string) (map[string]int, core.ExecResult) {
	t.Helper()
	var prog strings.Builder
	prog.WriteString(probePrelude)
	for _, n := range names {
		p, ok := syscallProbes[n]
		if !ok {
			t.Fatalf("no probe for %s", n)
		}
		fmt.Fprintf(&prog, "%s\nprint(%q, e)\n", p, n)
	}
	res, err := b.Exec(context.Background(), id, core.ExecRequest{Command: []string{"python3", "-c", prog.String()}, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	got := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			if n, err := strconv.Atoi(f[1]); err == nil {
				got[f[0]] = n
			}
		}
	}
	if len(got) != len(names) {
		t.Fatalf("probe printed %d of %d results: %+v", len(got), len(names), res)
	}
	return got, res
}

// wantDenied is the errno the default filter returns for a probe.
func wantDenied(name string) unix.Errno {
	if name == "clone3" {
		return unix.ENOSYS // so libc falls back to clone(2), whose flags the filter checks
	}
	return unix.EPERM
}

func seccompCase(name, attack string, calls ...string) advCase {
	contain := "seccomp filter: EPERM"
	for _, c := range calls {
		if c == "clone3" {
			contain = "seccomp filter: EPERM; clone3 ENOSYS, so libc falls back to clone"
		}
	}
	return advCase{name, attack, contain, func(e *advEnv) string {
		got, _ := probeSyscalls(e.t, e.b, e.id, calls...)
		var parts []string
		for _, c := range calls {
			e.expect(got[c] == int(wantDenied(c)), "%s: errno %d (%v), want %v", c, got[c], unix.Errno(got[c]), wantDenied(c))
			parts = append(parts, fmt.Sprintf("%s: %s", c, unix.ErrnoName(unix.Errno(got[c]))))
		}
		return strings.Join(parts, "; ")
	}}
}

// TestSeccompOffDiffers shows the filter is what denies: with seccomp =
// "off", calls the kernel allows an unprivileged process go through, and
// every result says the filter is off.
func TestSeccompOffDiffers(t *testing.T) {
	names := make([]string, 0, len(syscallProbes))
	for n := range syscallProbes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, mode := range []string{"default", "off"} {
		t.Run(mode, func(t *testing.T) {
			b := newBackend(t, map[string]any{"seccomp": mode}, core.SandboxSpec{})
			id := create(t, b, core.SandboxSpec{})
			got, res := probeSyscalls(t, b, id, names...)
			if mode == "default" {
				if res.Isolation != "namespaces" {
					t.Errorf("isolation = %q", res.Isolation)
				}
				for _, n := range names {
					if got[n] != int(wantDenied(n)) {
						t.Errorf("%s: errno %d, want %v", n, got[n], wantDenied(n))
					}
				}
				return
			}
			if res.Isolation != "namespaces (seccomp off)" {
				t.Errorf("isolation = %q; want it to say seccomp is off", res.Isolation)
			}
			// Without the filter a sandboxed process may make a user
			// namespace, and clone3 reaches the kernel.
			for _, n := range []string{"unshare", "clone"} {
				if got[n] != 0 {
					t.Errorf("%s without filter: errno %d, want success", n, got[n])
				}
			}
			if got["clone3"] == int(unix.ENOSYS) {
				t.Errorf("clone3 without filter: ENOSYS")
			}
			if got["keyctl"] == int(unix.EPERM) {
				t.Errorf("keyctl without filter: EPERM")
			}
			execOK(t, b, id, "true")
			infos, err := b.List(context.Background(), nil)
			if err != nil || len(infos) != 1 || infos[0].Isolation != "namespaces (seccomp off)" {
				t.Errorf("List = %+v, %v", infos, err)
			}
		})
	}
}
