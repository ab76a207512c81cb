package sandboxinit

import (
	"context"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// traceMeEnv makes the test binary a command that asks to be traced by its
// parent and then execs /bin/true, so it stops there (see TestMain).
const traceMeEnv = "SANDBOXINIT_TEST_TRACEME"

func TestMain(m *testing.M) {
	if os.Getenv(traceMeEnv) == "1" {
		runtime.LockOSThread() // the tracee is this thread, and it must be the one to exec
		syscall.RawSyscall(syscall.SYS_PTRACE, syscall.PTRACE_TRACEME, 0, 0)
		syscall.Exec("/bin/true", []string{"true"}, nil)
		os.Exit(3)
	}
	os.Exit(m.Run())
}

// A command that asks to be traced by its parent (the init) stops at its
// next exec. The init's wait for it must not take that stop for its exit:
// the command stays stopped until its timeout kills it. With pidfds the
// exit shows on the pidfd; without them (kernels before 5.3) the wait
// alone decides.
func TestSpawnerWaitSkipsTraceStops(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	srv := &initServer{reap: newReaper(), warm: make(chan struct{}), oomFloor: "0"}
	close(srv.warm)
	for _, pidfd := range []bool{true, false} {
		srv.pidfdPolls = pidfd
		spec := ExecSpec{Argv: []string{exe, "-test.run=^$"}, Env: []string{traceMeEnv + "=1"}, Dir: "/",
			Timeout: 300 * time.Millisecond, MaxOutput: 1 << 10}
		res, err := Run(context.Background(), spec, spawnerStarter{srv}, "test", nil)
		if err != nil || !res.TimedOut || res.Signal != "SIGKILL" {
			t.Errorf("pidfd polling %v: %+v, %v; want a timeout", pidfd, res, err)
		}
	}
}
