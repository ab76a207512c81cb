package local

import (
	"context"
	"encoding/binary"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
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

// TestSeccompProgramDecisions runs the assembled filter in x/net/bpf's
// interpreter on hand-made seccomp_data, so every rule is checked without
// a kernel. The interpreter loads words big-endian, so the data is written
// that way; the 64-bit arguments are split in two words at the offsets the
// filter reads on this (little-endian) architecture.
func TestSeccompProgramDecisions(t *testing.T) {
	prog, err := seccompProgram()
	if err != nil {
		t.Fatal(err)
	}
	raw := make([]bpf.RawInstruction, len(prog)/8)
	for i := range raw {
		b := prog[i*8:]
		raw[i] = bpf.RawInstruction{Op: binary.NativeEndian.Uint16(b), Jt: b[2], Jf: b[3], K: binary.NativeEndian.Uint32(b[4:])}
	}
	insns, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("filter does not disassemble")
	}
	vm, err := bpf.NewVM(insns)
	if err != nil {
		t.Fatalf("filter rejected by the interpreter: %v", err)
	}
	info, err := arch.GetInfo("")
	if err != nil {
		t.Fatal(err)
	}
	data := func(archID uint32, nr int, args ...uint64) []byte {
		d := make([]byte, 64)
		binary.BigEndian.PutUint32(d[0:], uint32(nr))
		binary.BigEndian.PutUint32(d[4:], archID)
		for i, a := range args {
			binary.BigEndian.PutUint32(d[16+8*i:], uint32(a))
			binary.BigEndian.PutUint32(d[16+8*i+4:], uint32(a>>32))
		}
		return d
	}
	const (
		allow  = unix.SECCOMP_RET_ALLOW
		eperm  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
		enosys = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	)
	native := uint32(info.ID)
	cases := []struct {
		name string
		in   []byte
		want uint32
	}{
		{"read", data(native, unix.SYS_READ, 0, 0, 0), allow},
		{"execve", data(native, unix.SYS_EXECVE), allow},
		{"fork-like clone", data(native, unix.SYS_CLONE, uint64(unix.SIGCHLD)), allow},
		{"thread clone", data(native, unix.SYS_CLONE, unix.CLONE_VM|unix.CLONE_FS|unix.CLONE_FILES|unix.CLONE_SIGHAND|unix.CLONE_THREAD), allow},
		{"vfork clone", data(native, unix.SYS_CLONE, unix.CLONE_VM|unix.CLONE_VFORK|uint64(unix.SIGCHLD)), allow},
		{"clone NEWUSER", data(native, unix.SYS_CLONE, unix.CLONE_NEWUSER|uint64(unix.SIGCHLD)), eperm},
		{"clone NEWNET", data(native, unix.SYS_CLONE, unix.CLONE_NEWNET), eperm},
		{"clone NEWNS", data(native, unix.SYS_CLONE, unix.CLONE_NEWNS), eperm},
		{"clone3", data(native, unix.SYS_CLONE3), enosys},
		{"ptrace TRACEME", data(native, unix.SYS_PTRACE, unix.PTRACE_TRACEME), allow},
		{"ptrace DETACH", data(native, unix.SYS_PTRACE, unix.PTRACE_DETACH), allow},
		{"ptrace ATTACH", data(native, unix.SYS_PTRACE, unix.PTRACE_ATTACH), eperm},
		{"ptrace PEEKDATA", data(native, unix.SYS_PTRACE, unix.PTRACE_PEEKDATA), eperm},
		{"ptrace SEIZE", data(native, unix.SYS_PTRACE, unix.PTRACE_SEIZE), eperm},
		{"ptrace TRACEME in the high word", data(native, unix.SYS_PTRACE, 1<<32), eperm},
		{"foreign ABI", data(0x40000003 /* AUDIT_ARCH_I386 */, 1 /* exit on i386 */), enosys},
	}
	for _, name := range seccompDenied {
		nr, ok := info.SyscallNames[name]
		if !ok {
			t.Errorf("%s: not in this architecture's table", name)
			continue
		}
		cases = append(cases, struct {
			name string
			in   []byte
			want uint32
		}{name, data(native, nr), eperm})
	}
	for _, c := range cases {
		got, err := vm.Run(c.in)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if uint32(got) != c.want {
			t.Errorf("%s: filter returns %#x, want %#x", c.name, uint32(got), c.want)
		}
	}
}
