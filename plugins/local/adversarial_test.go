package local

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/plugins/local/sandboxinit"
)

var updateDoc = flag.Bool("rlhost.update-doc", false, "rewrite the adversarial results table in docs/local-sandbox.md")

// The adversarial suite: hostile programs, the containment each must show,
// and a healthy host and sandbox afterwards. Limits are small to keep the
// suite fast.
var advLimits = core.Limits{
	MemoryBytes:   64 << 20,
	Pids:          64,
	TmpBytes:      16 << 20,
	DiskBytes:     32 << 20,
	FileSizeBytes: 8 << 20,
	OpenFiles:     64,
	OutputBytes:   64 << 10,
}

const advTimeout = time.Second

type advEnv struct {
	t   *testing.T
	b   *Backend
	id  string
	ctx context.Context
}

// execShort runs a shell script that only the suite's 1 s timeout ends.
func (e *advEnv) execShort(script string) core.ExecResult {
	e.t.Helper()
	return e.execReq(core.ExecRequest{Command: sh(script), Timeout: advTimeout})
}

// exec runs a shell script that should end by itself; the generous
// timeout only keeps a loaded CI machine from turning it into a timeout.
func (e *advEnv) exec(script string) core.ExecResult {
	e.t.Helper()
	return e.execReq(core.ExecRequest{Command: sh(script), Timeout: 20 * time.Second})
}

func (e *advEnv) execReq(req core.ExecRequest) core.ExecResult {
	e.t.Helper()
	res, err := e.b.Exec(e.ctx, e.id, req)
	if err != nil {
		e.t.Fatalf("Exec %q: %v (the sandbox itself failed)", req.Command, err)
	}
	return res
}

func (e *advEnv) expect(cond bool, format string, args ...any) {
	e.t.Helper()
	if !cond {
		e.t.Errorf(format, args...)
	}
}

func summary(r core.ExecResult) string {
	s := fmt.Sprintf("exit %d", r.ExitCode)
	if r.Signal != "" {
		s += " " + r.Signal
	}
	if l := r.LimitHit(); l != "" {
		s += ", " + l
	}
	var more []string
	if r.OOMKilled && r.LimitHit() != "oom_killed" {
		more = append(more, "oom_killed")
	}
	if r.PidsExceeded && r.LimitHit() != "pids_exceeded" {
		more = append(more, "pids_exceeded")
	}
	if r.OutputTruncated && r.LimitHit() != "output_truncated" {
		more = append(more, "output_truncated")
	}
	if len(more) > 0 {
		s += " (+" + strings.Join(more, ", ") + ")"
	}
	return s
}

type advCase struct {
	name    string
	attack  string
	contain string
	run     func(e *advEnv) string // returns what was observed
}

func advCases() []advCase {
	return []advCase{
		{"busy-loop", "`while :; do :; done`", "killed at the wall-clock timeout", func(e *advEnv) string {
			r := e.execShort("while :; do :; done")
			e.expect(r.TimedOut, "not timed out: %+v", r)
			return summary(r)
		}},
		{"sleep", "`sleep 1000` (no CPU used)", "killed at the wall-clock timeout", func(e *advEnv) string {
			r := e.execShort("sleep 1000")
			e.expect(r.TimedOut, "not timed out: %+v", r)
			return summary(r)
		}},
		{"pause", "`signal.pause()` in Python", "killed at the wall-clock timeout", func(e *advEnv) string {
			r := e.execShort("exec python3 -c 'import signal; signal.pause()'")
			e.expect(r.TimedOut, "not timed out: %+v", r)
			return summary(r)
		}},
		{"cpu-in-child", "busy loop in a background child, parent waits", "timeout kills the whole process group", func(e *advEnv) string {
			r := e.execShort("(while :; do :; done) & wait")
			e.expect(r.TimedOut, "not timed out: %+v", r)
			// Counted with shell builtins only: a pipeline's forked children
			// are named sh until they exec, and would be counted too.
			ps := e.exec(`n=0; for f in /proc/[0-9]*/comm; do read c < "$f" 2>/dev/null && [ "$c" = sh ] && n=$((n+1)); done; echo $n`)
			e.expect(strings.TrimSpace(ps.Stdout) == "1", "child survived: %q", ps.Stdout)
			return summary(r) + "; no child left"
		}},
		{"cpu-time", "busy loop with limits.cpu_time = 1s, timeout 20s", "RLIMIT_CPU: SIGXCPU/SIGKILL", func(e *advEnv) string {
			r := e.execReq(core.ExecRequest{Command: []string{"python3", "-c", "while True: pass"}, Timeout: 20 * time.Second})
			e.expect(r.CPUTimeExceeded && !r.TimedOut, "cpu limit did not fire: %+v", r)
			return summary(r)
		}},
		{"memory-bomb", "Python allocating 512 MiB (limit 64 MiB)", "cgroup OOM kill, reported oom_killed", func(e *advEnv) string {
			// A longer timeout: under a busy host, reclaim before the OOM kill can be slow.
			r := e.execReq(core.ExecRequest{Command: []string{"python3", "-c", "b = bytearray(512 << 20); print(len(b))"}, Timeout: 20 * time.Second})
			e.expect(r.OOMKilled && !r.TimedOut && r.Signal == "SIGKILL", "not OOM killed: %+v", r)
			return summary(r)
		}},
		{"memory-split", "8 processes x 16 MiB each (limit 64 MiB for the sandbox)", "whole-sandbox memory limit: OOM kill", func(e *advEnv) string {
			// The memory-bomb's longer timeout: eight interpreters must start
			// before the fifth allocation, which a busy 2-core machine has
			// taken more than a second to do.
			r := e.execReq(core.ExecRequest{Command: sh(`for i in 1 2 3 4 5 6 7 8; do python3 -c 'import time; b = bytearray(16 << 20); b[::4096] = b"x" * len(b[::4096]); time.sleep(5)' & done; wait`), Timeout: 20 * time.Second})
			e.expect(r.OOMKilled, "no OOM kill: %+v", r)
			return summary(r)
		}},
		{"fork-bomb", "`f(){ f|f& }; f` in sh", "pids.max; the sandbox stays usable", func(e *advEnv) string {
			r := e.execShort("f(){ f|f& }; f; sleep 2")
			e.expect(r.PidsExceeded, "pids limit did not fire: %+v", r)
			return summary(r)
		}},
		{"stdout-flood", "50 MB to stdout", "capture capped at 64 KiB, output_truncated", func(e *advEnv) string {
			r := e.exec("head -c 50000000 /dev/zero")
			e.expect(r.OutputTruncated && len(r.Stdout) == 64<<10, "stdout not capped: %d bytes, %+v", len(r.Stdout), r.OutputTruncated)
			return summary(r)
		}},
		{"stderr-flood", "`yes` to stderr until the timeout", "capture capped, output_truncated and timed_out", func(e *advEnv) string {
			r := e.execShort("yes >&2")
			e.expect(r.OutputTruncated && r.TimedOut && len(r.Stderr) == 64<<10, "stderr not capped: %d bytes", len(r.Stderr))
			return summary(r)
		}},
		{"fill-workspace", "write 100 MiB files into /workspace (disk 32 MiB)", "ENOSPC from the workspace tmpfs", func(e *advEnv) string {
			r := e.exec("for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do head -c 5000000 /dev/zero > /workspace/f$i || exit 9; done")
			e.expect(r.ExitCode == 9 && strings.Contains(r.Stderr, "No space"), "workspace not capped: %+v", r)
			rm := e.exec("rm -f /workspace/f*")
			e.expect(rm.ExitCode == 0, "cleanup failed")
			return summary(r) + ", No space left on device"
		}},
		{"fill-tmp", "write 100 MiB into /tmp (tmp 16 MiB)", "ENOSPC from the /tmp tmpfs", func(e *advEnv) string {
			r := e.exec("for i in 1 2 3 4 5 6 7 8 9 10; do head -c 5000000 /dev/zero > /tmp/f$i || exit 9; done")
			e.expect(r.ExitCode == 9 && strings.Contains(r.Stderr, "No space"), "tmp not capped: %+v", r)
			return summary(r) + ", No space left on device"
		}},
		{"sparse-file", "`truncate -s 100G` and a write at offset 50 GiB", "RLIMIT_FSIZE (8 MiB): EFBIG", func(e *advEnv) string {
			r := e.exec("truncate -s 100G /workspace/sparse; echo t=$?; dd if=/dev/zero of=/workspace/sparse2 bs=1 count=1 seek=50G 2>&1; echo d=$?")
			e.expect(strings.Contains(r.Stdout, "t=1") && strings.Contains(r.Stdout, "d=1"), "sparse file allowed: %q", r.Stdout)
			return "truncate and dd fail: File too large"
		}},
		{"write-root", "create /evil", "read-only root", func(e *advEnv) string {
			r := e.exec("touch /evil")
			e.expect(r.ExitCode != 0 && strings.Contains(r.Stderr, "Read-only"), "wrote to /: %+v", r)
			return summary(r) + ", Read-only file system"
		}},
		{"write-etc", "append to /etc/passwd", "read-only bind of the host's /etc", func(e *advEnv) string {
			before, _ := os.ReadFile("/etc/passwd")
			r := e.exec("echo 'evil::0:0::/:/bin/sh' >> /etc/passwd")
			after, _ := os.ReadFile("/etc/passwd")
			e.expect(r.ExitCode != 0 && string(before) == string(after), "host /etc/passwd writable: %+v", r)
			return summary(r) + ", host file unchanged"
		}},
		{"write-usr", "create /usr/bin/evil", "read-only bind of the host's /usr", func(e *advEnv) string {
			r := e.exec("echo x > /usr/bin/rlhost-evil")
			_, err := os.Stat("/usr/bin/rlhost-evil")
			e.expect(r.ExitCode != 0 && errors.Is(err, os.ErrNotExist), "wrote to /usr: %+v", r)
			return summary(r) + ", nothing on the host"
		}},
		{"read-shadow", "`cat /etc/shadow`, `/etc/gshadow`, `/etc/sudoers`, ssh host keys", "not in the curated /etc (and unreadable by the sandbox's host uid anyway)", func(e *advEnv) string {
			r := e.exec("cat /etc/shadow /etc/gshadow /etc/sudoers /etc/ssh/ssh_host_*_key")
			e.expect(r.ExitCode != 0 && r.Stdout == "" && strings.Count(r.Stderr, "No such file") >= 4, "read shadow: %+v", r)
			return summary(r) + ", No such file or directory"
		}},
		{"read-root-home", "`ls /root`", "not in the runtime view", func(e *advEnv) string {
			r := e.exec("ls -a /root")
			e.expect(r.ExitCode != 0 && strings.Contains(r.Stderr, "No such file"), "listed /root: %+v", r)
			return summary(r) + ", No such file or directory"
		}},
		{"host-env", "dump env and every /proc/*/environ", "only configured variables; host secrets absent", func(e *advEnv) string {
			r := e.exec("env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'")
			for _, s := range []string{"sk-openai-host-secret", "dtn-host-secret", "OPENAI_API_KEY", "DAYTONA_API_KEY", sandboxinit.RoleEnv} {
				e.expect(!strings.Contains(r.Stdout, s), "host secret %q visible", s)
			}
			e.expect(strings.Contains(r.Stdout, "SANDBOX_VAR=configured"), "configured env missing")
			return "only PATH, HOME and configured variables"
		}},
		{"other-workspace", "find another sandbox's workspace file (host-directory workspaces)", "state dir hidden; other sandbox invisible", func(e *advEnv) string {
			state := e.t.TempDir()
			os.Chmod(filepath.Dir(state), 0o711)
			b2 := newBackend(e.t, map[string]any{"state_dir": state, "workspace": "host"}, core.SandboxSpec{})
			victim := create(e.t, b2, core.SandboxSpec{})
			if err := b2.WriteFile(e.ctx, victim, "victim-secret.txt", []byte("secret"), 0o644); err != nil {
				e.t.Fatal(err)
			}
			attacker := create(e.t, b2, core.SandboxSpec{})
			ws := filepath.Join(state, "sandboxes", victim, "workspace")
			r, err := b2.Exec(e.ctx, attacker, core.ExecRequest{Command: sh("ls " + state + "; cat " + ws + "/victim-secret.txt; find / -xdev -name victim-secret.txt 2>/dev/null"), Timeout: 5 * time.Second})
			e.expect(err == nil && !strings.Contains(r.Stdout, "secret"), "other workspace reachable: %+v %v", r, err)
			return "state dir covered by an empty tmpfs; file not found"
		}},
		{"net-egress", "connect to a host listener on 127.0.0.1 and to 8.8.8.8:53", "private loopback only: refused / unreachable", func(e *advEnv) string {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				e.t.Fatal(err)
			}
			defer ln.Close()
			port := ln.Addr().(*net.TCPAddr).Port
			r := e.exec(fmt.Sprintf(`python3 -c '
import socket
for addr in [("127.0.0.1", %d), ("8.8.8.8", 53)]:
    s = socket.socket(); s.settimeout(0.3)
    try:
        s.connect(addr); print("CONNECTED", addr)
    except OSError as err:
        print("blocked", addr, err.__class__.__name__)
'`, port))
			e.expect(r.ExitCode == 0 && !strings.Contains(r.Stdout, "CONNECTED") && strings.Count(r.Stdout, "blocked") == 2, "egress: %+v", r)
			return strings.ReplaceAll(strings.TrimSpace(r.Stdout), "\n", "; ")
		}},
		{"port-collision", "bind 127.0.0.1:8080 in two sandboxes at once", "separate network namespaces: both succeed", func(e *advEnv) string {
			other := create(e.t, e.b, core.SandboxSpec{Limits: advLimits})
			defer e.b.Destroy(e.ctx, other)
			listen := `python3 -c 'import socket,sys; s=socket.socket(); s.bind(("127.0.0.1", 8080)); s.listen(); print("bound")' `
			bg := e.exec("nohup python3 -c 'import socket,time; s=socket.socket(); s.bind((\"127.0.0.1\", 8080)); s.listen(); time.sleep(30)' >/dev/null 2>&1 & sleep 0.3")
			r, err := e.b.Exec(e.ctx, other, core.ExecRequest{Command: sh(listen), Timeout: 5 * time.Second})
			e.expect(bg.ExitCode == 0 && err == nil && strings.Contains(r.Stdout, "bound"), "second bind failed: %+v %v", r, err)
			return "both bound"
		}},
		{"background", "`sleep 1000 &` then return", "exec returns; the process persists to the next exec", func(e *advEnv) string {
			r := e.exec("sleep 1000 >/dev/null 2>&1 & echo $!")
			pid := strings.TrimSpace(r.Stdout)
			ps := e.exec("kill -0 " + pid + " && echo alive")
			e.expect(!r.TimedOut && r.ExitCode == 0 && strings.TrimSpace(ps.Stdout) == "alive", "background: %+v, next exec %+v", r, ps)
			return "exit 0; alive in the next exec"
		}},
		{"daemon", "double fork + setsid daemon holding stdout open", "exec returns after the 50 ms output drain (killing on destroy: lifecycle tests)", func(e *advEnv) string {
			r := e.exec("(setsid sh -c 'while :; do echo tick; sleep 0.1; done' &) ; echo started")
			// The daemon shares stdout, so its first tick may come first.
			e.expect(!r.TimedOut && slices.Contains(strings.Split(r.Stdout, "\n"), "started"), "daemon: %+v", r)
			return summary(r)
		}},
		{"kill-parent", "`kill -9 1`, `kill -TERM 1`, `kill -9 $PPID`", "PID 1 ignores them; the sandbox keeps working", func(e *advEnv) string {
			r := e.exec("kill -9 1; kill -TERM 1; kill -ABRT 1; kill -SEGV 1; kill -9 $PPID; echo still here")
			e.expect(strings.Contains(r.Stdout, "still here"), "kill parent: %+v", r)
			return summary(r)
		}},
		{"setuid", "`su` to root; a setuid copy in /workspace", "no_new_privs + nosuid + no capabilities", func(e *advEnv) string {
			r := e.exec("su -c 'cat /etc/shadow' root </dev/null; cp /bin/cat /workspace/suid && chmod u+s /workspace/suid; /workspace/suid /etc/shadow; grep CapEff /proc/self/status")
			e.expect(!strings.Contains(r.Stdout, "root:") && strings.Contains(r.Stdout, "CapEff:\t0000000000000000"), "setuid: %+v", r)
			return "denied; CapEff 0"
		}},
		{"mount", "`mount -t tmpfs x /mnt`", "no capabilities in the sandbox's namespace", func(e *advEnv) string {
			r := e.exec("mount -t tmpfs x /mnt; echo m=$?")
			e.expect(!strings.Contains(r.Stdout, "m=0"), "mount: %+v", r)
			return "mount fails: permission denied"
		}},
		{"mount-table", "look for any writable or setuid-capable mount", "only /workspace, /tmp, /run, /dev/shm (and proc, device nodes) writable; all nosuid", func(e *advEnv) string {
			r := e.exec("cut -d' ' -f5,6 /proc/self/mountinfo")
			writable := map[string]bool{"/workspace": true, "/tmp": true, "/run": true, "/dev/shm": true, "/proc": true,
				"/dev/null": true, "/dev/zero": true, "/dev/full": true, "/dev/random": true, "/dev/urandom": true, "/dev/tty": true}
			n := 0
			for _, line := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
				mp, opts, _ := strings.Cut(line, " ")
				n++
				e.expect(strings.Contains(opts, "nosuid"), "mount %s without nosuid: %s", mp, opts)
				if strings.HasPrefix(opts, "rw") {
					e.expect(writable[mp], "unexpected writable mount %s", mp)
				}
			}
			return fmt.Sprintf("%d mounts checked", n)
		}},
		{"proc-init", "read /proc/1/environ (and of each init thread) and /proc/1/mem", "init is non-dumpable: denied", func(e *advEnv) string {
			r := e.exec("cat /proc/1/environ; for t in /proc/1/task/*; do cat $t/environ; done; dd if=/proc/1/mem of=/dev/null bs=1 count=1 skip=4194304 2>&1")
			e.expect(strings.Contains(r.Stderr+r.Stdout, "Permission denied") && !strings.Contains(r.Stdout, sandboxinit.RoleEnv), "init readable: %+v", r)
			return "Permission denied"
		}},
		{"proc-sys", "write /proc/sys/kernel/hostname and /proc/sys/vm/drop_caches", "host-owned, read-only for the sandbox", func(e *advEnv) string {
			r := e.exec("echo x > /proc/sys/kernel/hostname; echo a=$?; echo 3 > /proc/sys/vm/drop_caches; echo b=$?")
			e.expect(!strings.Contains(r.Stdout, "a=0") && !strings.Contains(r.Stdout, "b=0"), "proc/sys writable: %+v", r)
			return "Permission denied"
		}},
		{"pid-view", "list /proc", "only the sandbox's PID namespace", func(e *advEnv) string {
			r := e.exec("ls -d /proc/[0-9]* | wc -l")
			e.expect(strings.TrimSpace(r.Stdout) != "" && len(strings.TrimSpace(r.Stdout)) == 1, "sees many processes: %q", r.Stdout)
			return strings.TrimSpace(r.Stdout) + " processes visible"
		}},
		{"inherited-fds", "list the file descriptors a command starts with (control socket, cgroup files)", "only stdin, stdout, stderr", func(e *advEnv) string {
			// Run directly, not through sh, which keeps fds of its own.
			r := e.execReq(core.ExecRequest{Command: []string{"python3", "-c", `
import os
def is_open(fd):
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False
print(" ".join(str(fd) for fd in range(1024) if is_open(fd)))`}, Timeout: 20 * time.Second})
			e.expect(strings.TrimSpace(r.Stdout) == "0 1 2", "inherited fds: %+v", r)
			return "0 1 2"
		}},
		{"dev-access", "open /dev/vda and /dev/mem", "minimal /dev", func(e *advEnv) string {
			r := e.exec("ls /dev; head -c1 /dev/vda; head -c1 /dev/mem")
			e.expect(r.ExitCode != 0 && !strings.Contains(r.Stdout, "vda"), "dev: %+v", r)
			return "No such file or directory"
		}},
		{"open-files", "open 10000 files", "RLIMIT_NOFILE (64): EMFILE", func(e *advEnv) string {
			r := e.exec(`python3 -c '
fs = []
try:
    for i in range(10000): fs.append(open("/dev/null"))
except OSError as err: print("stopped at", len(fs), err.errno)'`)
			e.expect(strings.Contains(r.Stdout, "stopped at") && strings.Contains(r.Stdout, " 24"), "nofile: %+v", r)
			return strings.TrimSpace(r.Stdout)
		}},
		{"traversal-write", "WriteFile `../../etc/passwd`, `/etc/passwd`", "rejected: ErrInvalidPath", func(e *advEnv) string {
			for _, p := range []string{"../../etc/passwd", "/etc/passwd", "/workspace/../etc/passwd", "a/../../x"} {
				err := e.b.WriteFile(e.ctx, e.id, p, []byte("evil"), 0o644)
				e.expect(errors.Is(err, core.ErrInvalidPath), "WriteFile(%q) = %v", p, err)
			}
			return "ErrInvalidPath"
		}},
		{"symlink-read", "sandbox plants `ln -s /etc/shadow`, `ln -s ../../../etc/passwd`; ReadFile them", "openat2 RESOLVE_BENEATH: ErrInvalidPath", func(e *advEnv) string {
			e.exec("ln -s /etc/shadow /workspace/l1; ln -s ../../../../etc/passwd /workspace/l2; ln -s /proc/1/root/etc/passwd /workspace/l3")
			for _, p := range []string{"l1", "l2", "l3"} {
				_, err := e.b.ReadFile(e.ctx, e.id, p, 0)
				e.expect(errors.Is(err, core.ErrInvalidPath), "ReadFile(%q) = %v", p, err)
			}
			return "ErrInvalidPath"
		}},
		{"symlink-write", "sandbox plants `ln -s /etc etcdir`; WriteFile `etcdir/evil`", "ErrInvalidPath; nothing written", func(e *advEnv) string {
			e.exec("ln -s /etc /workspace/etcdir; ln -s /tmp /workspace/tmpdir")
			for _, p := range []string{"etcdir/evil", "tmpdir/evil"} {
				err := e.b.WriteFile(e.ctx, e.id, p, []byte("evil"), 0o644)
				e.expect(errors.Is(err, core.ErrInvalidPath), "WriteFile(%q) = %v", p, err)
			}
			r := e.exec("ls /tmp")
			e.expect(!strings.Contains(r.Stdout, "evil"), "wrote through symlink")
			return "ErrInvalidPath"
		}},
		{"special-file", "ReadFile of a FIFO and of /dev/zero via a symlink", "refused without blocking", func(e *advEnv) string {
			e.exec("mkfifo /workspace/fifo; ln -s /dev/zero /workspace/z")
			_, err1 := e.b.ReadFile(e.ctx, e.id, "fifo", 0)
			_, err2 := e.b.ReadFile(e.ctx, e.id, "z", 0)
			e.expect(errors.Is(err1, core.ErrInvalidPath) && errors.Is(err2, core.ErrInvalidPath), "special files: %v %v", err1, err2)
			return "ErrInvalidPath"
		}},
		{"file-size-api", "WriteFile of 9 MiB, ReadFile of a 7 MiB file with max 1 MiB", "ErrTooLarge", func(e *advEnv) string {
			err := e.b.WriteFile(e.ctx, e.id, "big", make([]byte, 9<<20), 0o644)
			e.expect(errors.Is(err, core.ErrTooLarge), "big write: %v", err)
			e.exec("head -c 7000000 /dev/zero > /workspace/seven")
			_, err = e.b.ReadFile(e.ctx, e.id, "seven", 1<<20)
			e.expect(errors.Is(err, core.ErrTooLarge), "big read: %v", err)
			return "ErrTooLarge"
		}},
		{"huge-argv", "a 200 KiB Python program passed with -c; the same on stdin; 100 KiB with -c", "over Linux's 128 KiB per-argument cap: exit 126 E2BIG, reported; stdin and 100 KiB run", func(e *advEnv) string {
			// Mostly one string literal, so compiling it stays cheap under 64 MiB.
			program := func(n int) (string, string) {
				return "s = '" + strings.Repeat("a", n) + "'\nprint(len(s))\n", fmt.Sprint(n)
			}
			prog, want := program(200 << 10)
			r := e.execReq(core.ExecRequest{Command: []string{"python3", "-c", prog}, Timeout: 10 * time.Second})
			e.expect(r.ExitCode == 126 && strings.Contains(r.Stderr, "argument list too long"), "200 KiB argv: %+v", r.Stderr)
			r2 := e.execReq(core.ExecRequest{Command: []string{"python3", "-"}, Stdin: []byte(prog), Timeout: 10 * time.Second})
			e.expect(r2.ExitCode == 0 && strings.TrimSpace(r2.Stdout) == want, "200 KiB stdin: %s / %+v", summary(r2), r2.Stderr)
			small, want := program(100 << 10)
			r3 := e.execReq(core.ExecRequest{Command: []string{"python3", "-c", small}, Timeout: 10 * time.Second})
			e.expect(r3.ExitCode == 0 && strings.TrimSpace(r3.Stdout) == want, "100 KiB argv: %s / %+v", summary(r3), r3.Stderr)
			return summary(r) + " (E2BIG); stdin: " + summary(r2) + "; 100 KiB: " + summary(r3)
		}},
		seccompCase("seccomp-keyring", "keyctl, add_key, request_key", "keyctl", "add_key", "request_key"),
		seccompCase("seccomp-bpf", "bpf(BPF_MAP_CREATE)", "bpf"),
		seccompCase("seccomp-perf", "perf_event_open", "perf_event_open"),
		seccompCase("seccomp-userfaultfd", "userfaultfd(UFFD_USER_MODE_ONLY)", "userfaultfd"),
		seccompCase("seccomp-io-uring", "io_uring_setup, io_uring_enter, io_uring_register", "io_uring_setup", "io_uring_enter", "io_uring_register"),
		seccompCase("seccomp-kexec", "kexec_load, kexec_file_load", "kexec_load", "kexec_file_load"),
		seccompCase("seccomp-mount", "mount, umount2, pivot_root, open_tree, fsopen, move_mount as raw syscalls", "mount", "umount2", "pivot_root", "open_tree", "fsopen", "move_mount"),
		seccompCase("seccomp-unshare", "unshare(CLONE_NEWUSER) (allowed by the kernel without privilege), setns", "unshare", "setns"),
		seccompCase("seccomp-clone-ns", "clone(CLONE_NEWUSER), and clone3 (flags in memory)", "clone", "clone3"),
		seccompCase("seccomp-ptrace", "PTRACE_ATTACH to its own child process", "ptrace"),
		seccompCase("seccomp-modules", "init_module, finit_module, delete_module", "init_module", "finit_module", "delete_module"),
		seccompCase("seccomp-handles", "open_by_handle_at, name_to_handle_at", "open_by_handle_at", "name_to_handle_at"),
		seccompCase("seccomp-reboot", "reboot", "reboot"),
		seccompCase("seccomp-swap", "swapon, swapoff", "swapon", "swapoff"),
		{"binary-output", "invalid UTF-8 and NUL bytes on stdout", "returned byte-exact", func(e *advEnv) string {
			r := e.exec(`printf '\377\376\000abc\000'`)
			e.expect(r.Stdout == "\xff\xfe\x00abc\x00", "bytes changed: %q", r.Stdout)
			return fmt.Sprintf("%q", r.Stdout)
		}},
		{"segfault", "NULL dereference in Python (ctypes)", "SIGSEGV reported, no core file", func(e *advEnv) string {
			r := e.exec("cd /workspace && python3 -c 'import ctypes; ctypes.string_at(0)'; ls /workspace | grep -c core || true")
			r2 := e.execReq(core.ExecRequest{Command: []string{"python3", "-c", "import ctypes; ctypes.string_at(0)"}, Timeout: 5 * time.Second})
			e.expect(r2.Signal == "SIGSEGV" && strings.TrimSpace(r.Stdout) == "0", "segfault: %+v / %+v", r2, r)
			return summary(r2)
		}},
	}
}

type advResult struct {
	c        advCase
	observed string
	ok       bool
}

func TestAdversarial(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-openai-host-secret")
	t.Setenv("DAYTONA_API_KEY", "dtn-host-secret")
	spec := core.SandboxSpec{Limits: advLimits, Env: map[string]string{"SANDBOX_VAR": "configured"}}
	b := newBackend(t, nil, spec)
	ctx := context.Background()
	// A bystander sandbox must stay healthy through every attack.
	bystander := create(t, b, spec)
	var results []advResult
	for _, c := range advCases() {
		var observed string
		ok := t.Run(c.name, func(t *testing.T) {
			s := spec
			if c.name == "cpu-time" {
				s.Limits.CPUTime = time.Second
			}
			id := create(t, b, s)
			e := &advEnv{t: t, b: b, id: id, ctx: ctx}
			observed = c.run(e)
			// The attacked sandbox still works...
			after := e.execReq(core.ExecRequest{Command: []string{"echo", "ok"}, Timeout: 10 * time.Second})
			if after.Stdout != "ok\n" {
				t.Errorf("sandbox unhealthy after attack: %+v", after)
			}
			if err := b.Destroy(ctx, id); err != nil {
				t.Errorf("Destroy: %v", err)
			}
			// ...and so do its neighbour and the host.
			res, err := b.Exec(ctx, bystander, core.ExecRequest{Command: []string{"echo", "ok"}, Timeout: 10 * time.Second})
			if err != nil || res.Stdout != "ok\n" {
				t.Errorf("bystander unhealthy: %+v %v", res, err)
			}
		})
		results = append(results, advResult{c, observed, ok})
	}
	if len(results) < 30 {
		t.Errorf("only %d adversarial cases", len(results))
	}
	if *updateDoc {
		writeAdvTable(t, results)
	}
}

const (
	docPath  = "../../docs/local-sandbox.md"
	docBegin = "<!-- adversarial-results:begin -->"
	docEnd   = "<!-- adversarial-results:end -->"
)

func writeAdvTable(t *testing.T, results []advResult) {
	t.Helper()
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s\n", docBegin)
	fmt.Fprintf(&sb, "Generated by `go test ./plugins/local -run TestAdversarial -rlhost.update-doc` on %s (kernel %s).\n\n", time.Now().UTC().Format("2006-01-02"), kernelRelease())
	sb.WriteString("| # | case | attack | required containment | observed | result |\n|---|---|---|---|---|---|\n")
	for i, r := range results {
		res := "pass"
		if !r.ok {
			res = "**FAIL**"
		}
		esc := func(s string) string { return strings.ReplaceAll(s, "|", "\\|") }
		fmt.Fprintf(&sb, "| %d | %s | %s | %s | %s | %s |\n", i+1, r.c.name, esc(r.c.attack), esc(r.c.contain), esc(r.observed), res)
	}
	sb.WriteString(docEnd)
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatalf("update doc: %v", err)
	}
	s := string(doc)
	i, j := strings.Index(s, docBegin), strings.Index(s, docEnd)
	if i < 0 || j < i {
		t.Fatalf("update doc: markers %s / %s not found in %s", docBegin, docEnd, docPath)
	}
	s = s[:i] + sb.String() + s[j+len(docEnd):]
	if err := os.WriteFile(docPath, []byte(s), 0o644); err != nil {
		t.Fatalf("update doc: %v", err)
	}
}

func kernelRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}
