package local

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
)

func TestTTLAndReap(t *testing.T) {
	b := newBackend(t, nil, core.SandboxSpec{})
	ctx := context.Background()
	info, err := b.Create(ctx, core.SandboxSpec{TTL: 200 * time.Millisecond, Labels: map[string]string{"ttl": "yes"}})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "TTL destroyed the sandbox", func() bool {
		l, _ := b.List(ctx, map[string]string{"ttl": "yes"})
		return len(l) == 0
	})
	if _, err := b.Exec(ctx, info.ID, core.ExecRequest{Command: []string{"true"}}); err == nil {
		t.Fatal("exec in an expired sandbox succeeded")
	}
}

func TestCreateRate(t *testing.T) {
	b := newBackend(t, map[string]any{"isolation": "none", "create_rate": 20}, core.SandboxSpec{})
	create(t, b, core.SandboxSpec{})
	start := time.Now()
	for i := 0; i < 3; i++ {
		create(t, b, core.SandboxSpec{})
	}
	// Each create reserves the next 50 ms slot and waits for its own; the
	// three after the first cannot all have started before 100 ms passed.
	if el := time.Since(start); el < 100*time.Millisecond {
		t.Errorf("3 creates at 20/s took %v; the limiter did not wait", el)
	}
}

func TestCgroupOffFallsBackToRlimits(t *testing.T) {
	spec := core.SandboxSpec{Limits: core.Limits{MemoryBytes: 256 << 20}}
	b := newBackend(t, map[string]any{"cgroup": "off"}, spec)
	id := create(t, b, spec)
	res, err := b.Exec(context.Background(), id, core.ExecRequest{Command: []string{"python3", "-c", "b = bytearray(512 << 20)"}, Timeout: 10 * time.Second})
	if err != nil || res.ExitCode == 0 || !strings.Contains(res.Stderr, "MemoryError") {
		t.Fatalf("RLIMIT_AS fallback did not stop a 512 MiB allocation: %+v %v", res, err)
	}
}

func TestNoneTimeoutKillsTree(t *testing.T) {
	b := newBackend(t, map[string]any{"isolation": "none"}, core.SandboxSpec{})
	id := create(t, b, core.SandboxSpec{})
	ctx := context.Background()
	res, err := b.Exec(ctx, id, core.ExecRequest{Command: sh("sleep 300 & echo $!; wait"), Timeout: 300 * time.Millisecond})
	if err != nil || !res.TimedOut {
		t.Fatalf("%+v %v", res, err)
	}
	pid := strings.TrimSpace(res.Stdout)
	eventually(t, "background child of a timed-out exec killed", func() bool {
		return procStart(atoi(pid)) == "" || isZombie(atoi(pid))
	})
	// A background process of a finished exec survives until Destroy.
	res, err = b.Exec(ctx, id, core.ExecRequest{Command: sh("sleep 300 >/dev/null 2>&1 & echo $!")})
	if err != nil {
		t.Fatal(err)
	}
	bg := atoi(strings.TrimSpace(res.Stdout))
	if procStart(bg) == "" {
		t.Fatal("background process did not survive its exec")
	}
	if err := b.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	eventually(t, "background process killed by Destroy", func() bool { return procStart(bg) == "" || isZombie(bg) })
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return n
}

func isZombie(pid int) bool {
	b, err := readProcStat(pid)
	return err == nil && strings.Contains(b, ") Z ")
}

func TestConcurrentExecs(t *testing.T) {
	b := newBackend(t, nil, core.SandboxSpec{})
	id := create(t, b, core.SandboxSpec{})
	ctx := context.Background()
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		go func() {
			res, err := b.Exec(ctx, id, core.ExecRequest{Command: sh("echo $((6*7))"), Timeout: 10 * time.Second})
			if err == nil && res.Stdout != "42\n" {
				err = context.DeadlineExceeded
			}
			errs <- err
		}()
	}
	for i := 0; i < 8; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// A cancelled context stops a long exec promptly.
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := b.Exec(cctx, id, core.ExecRequest{Command: []string{"sleep", "100"}, Timeout: time.Minute}); err == nil {
		t.Fatal("cancelled exec returned no error")
	}
	execOK(t, b, id, "true")
}

// A command given no input reads /dev/null (at once EOF), in every
// isolation, exec after exec: the init keeps one open for all of them.
func TestStdinWithoutInputIsDevNull(t *testing.T) {
	for _, iso := range modes() {
		t.Run(iso, func(t *testing.T) {
			b := newBackend(t, map[string]any{"isolation": iso}, core.SandboxSpec{})
			id := create(t, b, core.SandboxSpec{})
			for i := 0; i < 3; i++ {
				r := execOK(t, b, id, sh(`cat; stat -L -c '%F %t:%T' /proc/self/fd/0`)...)
				if got := strings.TrimSpace(r.Stdout); got != "character special file 1:3" {
					t.Errorf("exec %d: stdin was %q, want /dev/null (character special file 1:3)", i, got)
				}
			}
		})
	}
}

// A command in a sandbox holds its three standard streams and nothing
// else, exec after exec, with and without input: the streams the init
// makes ahead for the next command never reach this one.
func TestCommandsHoldOnlyTheirStreams(t *testing.T) {
	b := newBackend(t, map[string]any{"isolation": "namespaces"}, core.SandboxSpec{})
	id := create(t, b, core.SandboxSpec{})
	ctx := context.Background()
	for i := 0; i < 4; i++ {
		// The shell's fds, listed by its child (no pipeline: the shell
		// would hold the pipe's fds for a moment).
		req := core.ExecRequest{Command: sh(`ls /proc/$$/fd`), Timeout: 10 * time.Second}
		if i%2 == 1 {
			req.Stdin = []byte("input")
		}
		res, err := b.Exec(ctx, id, req)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec %d: %+v, %v", i, res, err)
		}
		if got := strings.Join(strings.Fields(res.Stdout), " "); got != "0 1 2" {
			t.Errorf("exec %d: the command's fds are %q, want 0 1 2", i, got)
		}
	}
}

// The init reaps orphans (it is their PID 1) without SIGCHLD, by polling
// while any process but itself is alive: orphans that exit while a command
// runs must not pile up as zombies until the sandbox's pids limit stops
// the command, and one that exits while the sandbox is idle must not stay
// a zombie.
func TestInitReapsOrphans(t *testing.T) {
	b := newBackend(t, map[string]any{"isolation": "namespaces"}, core.SandboxSpec{})
	id := create(t, b, core.SandboxSpec{Limits: core.Limits{Pids: 32}})
	ctx := context.Background()
	// 200 orphans, each exiting at once: far more than 32 if none were
	// reaped before the loop ends. The reaper polls, so a machine busy
	// enough to keep the init off a CPU for tens of milliseconds can let
	// 32 pile up once; an init that does not reap fails every attempt.
	orphans := core.ExecRequest{Timeout: 60 * time.Second,
		Command: sh(`i=0; while [ $i -lt 200 ]; do (true &); i=$((i+1)); done; echo done`)}
	for attempt := 1; ; attempt++ {
		res, err := b.Exec(ctx, id, orphans)
		if err == nil && res.ExitCode == 0 && !res.PidsExceeded && strings.TrimSpace(res.Stdout) == "done" {
			break
		}
		if attempt == 3 {
			t.Fatalf("orphans while a command runs, 3 attempts: %+v, %v", res, err)
		}
		t.Logf("attempt %d hit the pids limit (exit %d, pids exceeded %v); trying again", attempt, res.ExitCode, res.PidsExceeded)
	}
	// Seen from the host: a request would make the init reap on its way.
	b.mu.Lock()
	uid := b.boxes[id].meta.HostUID
	b.mu.Unlock()
	execOK(t, b, id, sh(`(sleep 0.2 &)`)...)
	time.Sleep(300 * time.Millisecond) // until the orphan has exited
	eventually(t, "the idle sandbox's exited orphan reaped", func() bool { return len(zombiesOfUID(uid)) == 0 })
	if len(procsOfUID(uid)) != 1 {
		t.Errorf("processes of the sandbox's uid: %v, want the init alone", procsOfUID(uid))
	}
}

// zombiesOfUID lists host processes of real uid uid that have exited and
// are not yet reaped.
func zombiesOfUID(uid int) []int {
	var out []int
	for _, pid := range procsOfUID(uid) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// The state follows the command name's closing parenthesis.
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 && strings.HasPrefix(string(b[i:]), ") Z") {
			out = append(out, pid)
		}
	}
	return out
}
