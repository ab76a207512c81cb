package local

import (
	"encoding/binary"
	"fmt"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The default seccomp filter, in the spirit of Docker's and nsjail's
// default profiles: it denies, with EPERM, the system calls sandboxed
// programs never need and that widen the kernel surface they can reach.
// Everything else is allowed. It is built with github.com/elastic/go-seccomp-bpf
// (pure Go, so the build stays cgo-free; it assembles the syscall table and
// argument checks into classic BPF), plus a short prologue of our own for
// what that library cannot express: ENOSYS instead of EPERM.
//
// The filter goes on the init's spawner thread, so every command and its
// descendants run under it; the init's other threads (which built the
// root with mount(2)) do not.

// seccompDenied are denied outright, with EPERM.
var seccompDenied = []string{
	// Kernel keyrings: not namespaced, a classic source of kernel bugs.
	"keyctl", "add_key", "request_key",
	// eBPF, perf events, userfaultfd and io_uring: large, often-exploited
	// kernel surfaces no test program needs.
	"bpf", "perf_event_open", "userfaultfd",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	// Replacing the kernel, loading modules, rebooting, swap, accounting,
	// the clock and quotas.
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"reboot", "swapon", "swapoff", "acct", "settimeofday", "clock_settime", "clock_adjtime",
	"quotactl", "quotactl_fd", "syslog", "vhangup", "iopl", "ioperm", "uselib",
	"lookup_dcookie", "nfsservctl",
	// Mounts and namespaces: the sandbox's view is fixed once built.
	"mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
	"fsconfig", "fsmount", "fspick", "mount_setattr", "unshare", "setns",
	// File handles bypass path-based access checks.
	"open_by_handle_at", "name_to_handle_at",
	// Reading or writing other processes' memory.
	"process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
}

// cloneNamespaceFlags are the clone(2) flags that create namespaces.
const cloneNamespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

// seccompProgram assembles the default filter for this architecture and
// returns it as an array of struct sock_filter in native byte order.
func seccompProgram() ([]byte, error) {
	policy := seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Action: seccomp.ActionErrno, Names: seccompDenied},
			{Action: seccomp.ActionErrno, NamesWithCondtions: []seccomp.NameWithConditions{
				// clone with any namespace flag.
				{Name: "clone", Conditions: seccomp.ArgumentConditions{
					{Argument: 0, Operation: seccomp.BitsSet, Value: cloneNamespaceFlags}}},
				// ptrace: only PTRACE_TRACEME and PTRACE_DETACH, which the
				// init uses to stop a command at its exec (to set rlimits
				// before it runs). Tracing anything is denied.
				{Name: "ptrace", Conditions: seccomp.ArgumentConditions{
					{Argument: 0, Operation: seccomp.NotEqual, Value: unix.PTRACE_TRACEME},
					{Argument: 0, Operation: seccomp.NotEqual, Value: unix.PTRACE_DETACH}}},
			}},
		},
	}
	body, err := policy.Assemble()
	if err != nil {
		return nil, fmt.Errorf("seccomp: assemble policy: %w", err)
	}
	native, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w; set seccomp = \"off\" on this architecture", err)
	}
	const (
		archOff = 4 // offsetof(struct seccomp_data, arch)
		nrOff   = 0 // offsetof(struct seccomp_data, nr)
		enosys  = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	)
	prologue := []bpf.Instruction{
		// Another ABI (32-bit int 0x80 on x86-64) has other syscall
		// numbers, which the policy does not check: refuse it whole.
		bpf.LoadAbsolute{Off: archOff, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(native.ID), SkipTrue: 1},
		bpf.RetConstant{Val: enosys},
		// clone3 passes its flags in memory, where seccomp cannot look:
		// ENOSYS makes libc fall back to clone(2), whose flags it checks.
		bpf.LoadAbsolute{Off: nrOff, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.SYS_CLONE3, SkipTrue: 1},
		bpf.RetConstant{Val: enosys},
	}
	raw, err := bpf.Assemble(append(prologue, body...))
	if err != nil {
		return nil, fmt.Errorf("seccomp: assemble: %w", err)
	}
	out := make([]byte, 0, 8*len(raw))
	for _, in := range raw {
		out = binary.NativeEndian.AppendUint16(out, in.Op)
		out = append(out, in.Jt, in.Jf)
		out = binary.NativeEndian.AppendUint32(out, in.K)
	}
	return out, nil
}
