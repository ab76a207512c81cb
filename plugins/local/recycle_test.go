package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
)

// What a sandbox's user leaves behind, and how its next user looks for it.
// Each probe prints nothing in a fresh sandbox.
var leftovers = []struct {
	name  string
	leave string
	probe string
}{
	{"background process", "sleep 1000 >/dev/null 2>&1 &",
		`for c in /proc/[0-9]*/comm; do [ "$(cat $c 2>/dev/null)" = sleep ] && echo "sleep alive"; done; true`},
	{"orphaned busy loop", "(sh -c 'while :; do :; done' >/dev/null 2>&1 &) &",
		// whil[e] matches the loop's command line but not grep's own.
		"grep -l 'whil[e] :' /proc/[0-9]*/cmdline 2>/dev/null; true"},
	{"files in /tmp", "echo secret >/tmp/answer", "cat /tmp/answer 2>/dev/null; true"},
	{"files in /workspace", "mkdir -p /workspace/d && echo secret >/workspace/d/answer", "ls -A /workspace"},
	{"files in /dev/shm", "echo secret >/dev/shm/answer", "ls -A /dev/shm"},
	{"files in /run", "echo secret >/run/answer", "ls -A /run"},
	{"System V shared memory", "ipcmk -M 4096 >/dev/null", "tail -n +2 /proc/sysvipc/shm"},
	{"System V message queue", "ipcmk -Q >/dev/null", "tail -n +2 /proc/sysvipc/msg"},
	{"System V semaphores", "ipcmk -S 2 >/dev/null", "tail -n +2 /proc/sysvipc/sem"},
	{"POSIX message queue",
		`python3 -c 'import ctypes, os; c = ctypes.CDLL("librt.so.1", use_errno=True); assert c.mq_open(b"/answer", os.O_CREAT | os.O_RDWR, 0o600, None) >= 0, ctypes.get_errno()'`,
		`python3 -c 'import ctypes, os; c = ctypes.CDLL("librt.so.1", use_errno=True); c.mq_open(b"/answer", os.O_RDWR) >= 0 and print("queue /answer exists")'`},
}

// A recycled sandbox must show its next user nothing of the last one:
// every leftover is checked in a fresh sandbox (where the probe must print
// nothing, or the probe proves nothing) and after a recycle.
func TestRecycleLeavesNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: recycle is tested as root (the launcher and template root)")
	}
	ctx := context.Background()
	b := newBackend(t, map[string]any{"pool_size": 1, "recycle": true}, core.SandboxSpec{})
	for _, lo := range leftovers {
		t.Run(lo.name, func(t *testing.T) {
			waitPool(t, b, 1)
			id := create(t, b, core.SandboxSpec{})
			b.mu.Lock()
			initPID := b.boxes[id].impl.(*nsBox).pid
			b.mu.Unlock()
			if out := execOK(t, b, id, sh(lo.probe)...).Stdout; out != "" {
				t.Fatalf("probe finds something in a fresh sandbox: %q", out)
			}
			execOK(t, b, id, sh(lo.leave)...)
			if out := execOK(t, b, id, sh(lo.probe)...).Stdout; out == "" {
				t.Fatalf("probe finds nothing right after %q: it cannot tell", lo.leave)
			}
			if err := b.Destroy(ctx, id); err != nil {
				t.Fatalf("Destroy: %v", err)
			}
			waitPool(t, b, 1)
			next := create(t, b, core.SandboxSpec{Labels: map[string]string{"k": "v"}})
			b.mu.Lock()
			nextPID := b.boxes[next].impl.(*nsBox).pid
			b.mu.Unlock()
			if nextPID != initPID {
				t.Fatalf("the next sandbox was not the recycled one (init %d, was %d)", nextPID, initPID)
			}
			if next == id {
				t.Fatalf("recycled sandbox kept its id %s", id)
			}
			if out := execOK(t, b, next, sh(lo.probe)...).Stdout; out != "" {
				t.Errorf("after recycling, the next user finds: %q", out)
			}
			if err := b.Destroy(ctx, id); !errors.Is(err, core.ErrNotFound) {
				t.Errorf("Destroy of the old id after recycling: %v, want ErrNotFound", err)
			}
			infos, err := b.List(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(infos) != 1 || infos[0].ID != next || infos[0].Labels["k"] != "v" {
				t.Errorf("List after recycling: %+v, want only %s with its labels", infos, next)
			}
			if err := b.Destroy(ctx, next); err != nil {
				t.Fatalf("Destroy: %v", err)
			}
		})
	}
}

// Only sandboxes of the block's own spec are recycled, and only up to
// pool_size; the rest are destroyed as without recycle.
func TestRecycleOnlyWhatFits(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: recycle is tested as root (the launcher and template root)")
	}
	ctx := context.Background()
	b := newBackend(t, map[string]any{"pool_size": 1, "recycle": true}, core.SandboxSpec{})
	waitPool(t, b, 1)
	other := create(t, b, core.SandboxSpec{Network: true})
	b.mu.Lock()
	otherUID := b.boxes[other].impl.(*nsBox).uid
	b.mu.Unlock()
	if err := b.Destroy(ctx, other); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the other spec's sandbox gone", func() bool { return len(procsOfUID(otherUID)) == 0 })
	a, c := create(t, b, core.SandboxSpec{}), create(t, b, core.SandboxSpec{})
	b.mu.Lock()
	uidA, uidC := b.boxes[a].impl.(*nsBox).uid, b.boxes[c].impl.(*nsBox).uid
	b.mu.Unlock()
	for _, id := range []string{a, c} {
		if err := b.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "one of the two destroyed, one kept", func() bool {
		return (len(procsOfUID(uidA)) == 0) != (len(procsOfUID(uidC)) == 0)
	})
	if n := b.PoolLen(); n != 1 {
		t.Fatalf("pool holds %d, want 1", n)
	}
}

// waitPool waits until the pool holds n sandboxes.
func waitPool(t *testing.T, b *Backend, n int) {
	t.Helper()
	eventually(t, "pool refilled", func() bool { return b.PoolLen() >= n })
}

// With seccomp = "off" commands may use keyrings, which belong to the
// sandbox's user and would outlive its processes; a reset clears them.
func TestRecycleClearsKeyrings(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: recycle is tested as root (the launcher and template root)")
	}
	if runtime.GOARCH != "amd64" {
		t.Skip("SKIP: the probe calls add_key and keyctl by their x86-64 numbers")
	}
	// add_key(2) is 248 and keyctl(2) 250 on x86-64; KEYCTL_SEARCH is 10
	// and the user keyring -4.
	const (
		leave = `python3 -c 'import ctypes; c = ctypes.CDLL(None, use_errno=True); c.syscall.restype = ctypes.c_long; assert c.syscall(248, b"user", b"answer", b"secret", 6, -4) >= 0, ctypes.get_errno()'`
		probe = `python3 -c 'import ctypes; c = ctypes.CDLL(None, use_errno=True); c.syscall.restype = ctypes.c_long; c.syscall(250, 10, -4, b"user", b"answer", 0) >= 0 and print("key found")'`
	)
	ctx := context.Background()
	b := newBackend(t, map[string]any{"pool_size": 1, "recycle": true, "seccomp": "off"}, core.SandboxSpec{})
	waitPool(t, b, 1)
	id := create(t, b, core.SandboxSpec{})
	if out := execOK(t, b, id, sh(probe)...).Stdout; out != "" {
		t.Fatalf("probe finds a key in a fresh sandbox: %q", out)
	}
	execOK(t, b, id, sh(leave)...)
	if out := execOK(t, b, id, sh(probe)...).Stdout; out == "" {
		t.Fatal("probe finds no key right after adding one: it cannot tell")
	}
	if err := b.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	waitPool(t, b, 1)
	next := create(t, b, core.SandboxSpec{})
	if out := execOK(t, b, next, sh(probe)...).Stdout; out != "" {
		t.Errorf("after recycling, the next user finds: %q", out)
	}
}

// Recycling is on by default where it is safe, with no pool: destroyed
// sandboxes are kept up to the most that were alive at once, and the next
// creates take them. Configure's probe is not kept.
func TestRecycleByDefault(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: recycle is tested as root (the launcher and template root)")
	}
	cases := []struct {
		name string
		cfg  map[string]any
		want bool
	}{
		{"default", nil, true},
		{"recycle = false", map[string]any{"recycle": false}, false},
		{"isolation none", map[string]any{"isolation": "none"}, false},
		{"host workspace", map[string]any{"workspace": "host"}, false},
	}
	ctx := context.Background()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.cfg["workspace"] == "host" {
				// Sandbox uids must reach a host-directory workspace.
				state := t.TempDir()
				os.Chmod(filepath.Dir(state), 0o711)
				c.cfg["state_dir"] = state
			}
			b := newBackend(t, c.cfg, core.SandboxSpec{})
			if n := b.PoolLen(); n != 0 {
				t.Fatalf("after Configure the pool holds %d, want 0 (the probe is not kept)", n)
			}
			impls := func(ids ...string) map[boxImpl]bool {
				b.mu.Lock()
				defer b.mu.Unlock()
				m := map[boxImpl]bool{}
				for _, id := range ids {
					m[b.boxes[id].impl] = true
				}
				return m
			}
			a, d := create(t, b, core.SandboxSpec{}), create(t, b, core.SandboxSpec{})
			first := impls(a, d)
			for _, id := range []string{a, d} {
				if err := b.Destroy(ctx, id); err != nil {
					t.Fatal(err)
				}
			}
			if got, want := b.PoolLen(), map[bool]int{true: 2}[c.want]; got != want {
				t.Fatalf("after destroying two, the pool holds %d, want %d", got, want)
			}
			e, f, g := create(t, b, core.SandboxSpec{}), create(t, b, core.SandboxSpec{}), create(t, b, core.SandboxSpec{})
			reused := 0
			for impl := range impls(e, f, g) {
				if first[impl] {
					reused++
				}
			}
			if want := map[bool]int{true: 2}[c.want]; reused != want {
				t.Errorf("%d of the next three sandboxes were recycled ones, want %d", reused, want)
			}
		})
	}
}

// A call from a recycled sandbox's last user must not reach its next one:
// calls running at Destroy are cancelled and answered before the reset,
// and a call that looked the sandbox up before Destroy but starts after it
// is refused.
func TestRecycleFencesLateCalls(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: recycle is tested as root (the launcher and template root)")
	}
	ctx := context.Background()
	b := newBackend(t, nil, core.SandboxSpec{})
	id := create(t, b, core.SandboxSpec{})
	old, err := b.get(id)
	if err != nil {
		t.Fatal(err)
	}
	running := make(chan error, 1)
	go func() {
		_, err := b.Exec(ctx, id, core.ExecRequest{Command: sh("setsid sleep 1000 >/dev/null 2>&1 & exec sleep 1000"), Timeout: time.Minute})
		running <- err
	}()
	eventually(t, "the exec running", func() bool {
		return len(procsOfUID(old.impl.(*nsBox).uid)) >= 3 // init and both sleeps
	})
	if err := b.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	select {
	case <-running:
	default:
		t.Fatal("Destroy returned while a call on the sandbox was still running")
	}
	next := create(t, b, core.SandboxSpec{})
	b.mu.Lock()
	reused := b.boxes[next].impl == old.impl
	b.mu.Unlock()
	if !reused {
		t.Fatal("the next sandbox is not the recycled one: the test proves nothing")
	}
	if _, _, err := old.enter(ctx); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("a call on the last user's sandbox after Destroy: %v, want ErrNotFound", err)
	}
	if out := execOK(t, b, next, sh(leftovers[0].probe)...).Stdout; out != "" {
		t.Errorf("the next user finds: %q", out)
	}
}

// The fence itself: close cancels the calls in flight and refuses new
// ones, and drained waits for the ones still running.
func TestSandboxCallFence(t *testing.T) {
	sb := &sandbox{meta: meta{ID: "x"}}
	cctx, done, err := sb.enter(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sb.close()
	select {
	case <-cctx.Done():
	case <-time.After(5 * time.Second):
		t.Error("close did not cancel the call in flight")
	}
	if _, _, err := sb.enter(context.Background()); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("enter after close: %v, want ErrNotFound", err)
	}
	if sb.drained(20 * time.Millisecond) {
		t.Error("drained with a call still running")
	}
	done()
	if !sb.drained(time.Second) {
		t.Error("not drained after the last call returned")
	}
}

// Sandboxes kept for reuse without a pool give their place under
// max_sandboxes to a create that cannot use them.
func TestKeptSandboxesYieldToOtherSpecs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: recycle is tested as root (the launcher and template root)")
	}
	ctx := context.Background()
	b := newBackend(t, map[string]any{"max_sandboxes": 2}, core.SandboxSpec{})
	a, c := create(t, b, core.SandboxSpec{}), create(t, b, core.SandboxSpec{})
	for _, id := range []string{a, c} {
		if err := b.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if n := b.PoolLen(); n != 2 {
		t.Fatalf("kept %d sandboxes, want 2", n)
	}
	if _, err := b.Create(ctx, core.SandboxSpec{Network: true}); err != nil {
		t.Fatalf("a create of another spec with only kept sandboxes alive: %v", err)
	}
	if n := b.PoolLen(); n != 1 {
		t.Errorf("kept %d sandboxes after the create, want 1", n)
	}
	if _, err := b.Create(ctx, core.SandboxSpec{}); err != nil {
		t.Errorf("a create of the block's spec takes the one left: %v", err)
	}
	if _, err := b.Create(ctx, core.SandboxSpec{}); !errors.Is(err, core.ErrLimitReached) {
		t.Errorf("a create past max_sandboxes with none kept: %v, want ErrLimitReached", err)
	}
}
