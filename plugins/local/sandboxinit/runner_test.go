package sandboxinit

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

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

// drain collects what a pipe still holds after the command exited, whether
// or not a background child keeps its write end open (then it is cut once
// nothing is left unread), and caps what it keeps.
func TestDrainCollectsPendingOutputAndCuts(t *testing.T) {
	for _, tc := range []struct {
		name      string
		data      string
		keepOpen  bool // a background child still holds the write end
		max       int64
		want      string
		truncated bool
	}{
		{name: "closed", data: "verdict\n", max: 100, want: "verdict\n"},
		{name: "held open", data: "verdict\n", keepOpen: true, max: 100, want: "verdict\n"},
		{name: "held open, empty", keepOpen: true, max: 100},
		{name: "capped", data: "0123456789", max: 4, want: "0123", truncated: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, w, err := rawPipe(0)
			if err != nil {
				t.Fatal(err)
			}
			if tc.data != "" {
				if _, err := unix.Write(w, []byte(tc.data)); err != nil {
					t.Fatal(err)
				}
			}
			if tc.keepOpen {
				defer unix.Close(w)
			} else {
				unix.Close(w)
			}
			o := outputs{fds: [2]int{r, -1}, bufs: [2]capBuf{{max: tc.max}, {max: tc.max}}}
			grace := time.Now().Add(drainGrace)
			if !o.drain(&grace, grace.Add(drainMax), -1, nil) {
				t.Fatal("drain stopped without a stop fd")
			}
			if got := string(o.bufs[0].buf); got != tc.want || o.bufs[0].truncated != tc.truncated {
				t.Errorf("got %q (truncated %v), want %q (%v)", got, o.bufs[0].truncated, tc.want, tc.truncated)
			}
			if o.fds[0] != -1 {
				t.Errorf("pipe left open")
			}
		})
	}
}

// collectUntil reads output as it comes and returns true once the exit fd
// turns readable, even while the pipes stay open, and false when the stop
// fd does first (the init then hands the command to a goroutine). While
// it waits, it calls its reap func (see reapPace).
func TestCollectUntil(t *testing.T) {
	for _, tc := range []struct {
		name string
		exit bool // else stop turns readable
		late bool // only once reap has been called
	}{
		{name: "exit", exit: true},
		{name: "stop"},
		{name: "exit after reaping", exit: true, late: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, w, err := rawPipe(0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(w)
			exitR, exitW, err := rawPipe(0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(exitR)
			defer unix.Close(exitW)
			stopR, stopW, err := rawPipe(0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(stopR)
			defer unix.Close(stopW)
			o := outputs{fds: [2]int{r, -1}, bufs: [2]capBuf{{max: 100}, {max: 100}}}
			reaped := make(chan struct{}, 1)
			reap := func() bool {
				select {
				case reaped <- struct{}{}:
				default:
				}
				return false
			}
			go func() {
				unix.Write(w, []byte("out"))
				if tc.late {
					// The reaping goes on while nothing else happens.
					select {
					case <-reaped:
					case <-time.After(10 * time.Second):
						t.Error("reap was not called")
					}
				}
				if tc.exit {
					unix.Write(exitW, []byte{0})
				} else {
					unix.Write(stopW, []byte{0})
				}
			}()
			if got := o.collectUntil(exitR, stopR, reap); got != tc.exit {
				t.Fatalf("collectUntil = %v, want %v", got, tc.exit)
			}
			unix.Close(w)
			grace := time.Now().Add(drainGrace)
			o.drain(&grace, grace.Add(drainMax), -1, nil)
			if got := string(o.bufs[0].buf); got != "out" {
				t.Errorf("got %q, want %q", got, "out")
			}
		})
	}
}

// noPidfdStarter is DirectStarter on a kernel without CLONE_PIDFD.
type noPidfdStarter struct{ DirectStarter }

func (s noPidfdStarter) Start(argv0 string, argv []string, attr *syscall.ProcAttr, atExec func(pid int) error) (int, WaitFunc, error) {
	a := *attr
	sys := *attr.Sys
	sys.PidFD = nil
	a.Sys = &sys
	return s.DirectStarter.Start(argv0, argv, &a, atExec)
}

// unpolledPidfdStarter gets a pidfd, on a kernel (5.2) whose pidfds do not
// report the exit to poll.
type unpolledPidfdStarter struct{ DirectStarter }

func (unpolledPidfdStarter) PidfdPolls() bool { return false }

// A command's exit is noticed with or without a pidfd to poll.
func TestRunWithAndWithoutPidfd(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   Starter
	}{
		{name: "pidfd", st: DirectStarter{}},
		{name: "no pidfd", st: noPidfdStarter{}},
		{name: "pidfd poll unsupported", st: unpolledPidfdStarter{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := ExecSpec{Argv: []string{"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, Dir: "/", MaxOutput: 100}
			res, pgid, err := RunPgid(context.Background(), spec, tc.st, "none", nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != 3 || res.Stdout != "out\n" || res.Stderr != "err\n" || pgid <= 0 {
				t.Errorf("got exit %d, stdout %q, stderr %q, pgid %d", res.ExitCode, res.Stdout, res.Stderr, pgid)
			}
			// More output than a pipe holds, read while the command runs.
			spec = ExecSpec{Argv: []string{"/bin/sh", "-c", "head -c 300000 /dev/zero"}, Dir: "/", MaxOutput: 1000}
			res, _, err = RunPgid(context.Background(), spec, tc.st, "none", nil)
			if err != nil || res.ExitCode != 0 || len(res.Stdout) != 1000 || !res.OutputTruncated {
				t.Errorf("flood: exit %d, %d bytes kept, truncated %v, %v", res.ExitCode, len(res.Stdout), res.OutputTruncated, err)
			}
		})
	}
}

func TestKernelAtLeast(t *testing.T) {
	for _, tc := range []struct {
		release string
		want    bool
	}{
		{"6.18.44-fc-v669", true},
		{"5.3.0", true},
		{"5.2.21", false},
		{"4.19.0-26-amd64", false},
		{"10.0", true},
		{"garbage", false},
	} {
		if got := kernelAtLeast(tc.release, 5, 3); got != tc.want {
			t.Errorf("kernelAtLeast(%q, 5, 3) = %v, want %v", tc.release, got, tc.want)
		}
	}
}

// Reaps come every reapEvery while they collect something, and back off,
// doubling, to reapEveryMax while they do not.
func TestReapPace(t *testing.T) {
	var p reapPace
	if got := p.next(false); got != reapEvery {
		t.Fatalf("first wait %v, want %v", got, reapEvery)
	}
	for round := 0; round < 2; round++ {
		prev := reapEvery
		for i := 0; i < 20; i++ {
			got := p.next(false)
			if want := min(2*prev, reapEveryMax); got != want {
				t.Fatalf("round %d, wait %d after nothing reaped: %v, want %v", round, i, got, want)
			}
			prev = got
		}
		if prev != reapEveryMax {
			t.Fatalf("round %d: backed off to %v, want %v", round, prev, reapEveryMax)
		}
		if got := p.next(true); got != reapEvery {
			t.Fatalf("round %d: wait after a reap %v, want %v", round, got, reapEvery)
		}
	}
}
