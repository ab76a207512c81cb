package local

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
)

// ownerEnv makes the test binary act as a separate process that owns
// sandboxes, so tests can SIGKILL a real owner.
const ownerEnv = "RLHOST_LOCAL_TEST_OWNER"

type ownedBox struct {
	ID      string `json:"id"`
	InitPID int    `json:"init_pid"`
	UID     int    `json:"uid"`
	BgPID   string `json:"bg_pid"`
	// Prepared marks a slot: the entry and cgroups of a sandbox not yet
	// created (slots.go), which a crash must not leave behind either.
	Prepared bool     `json:"prepared,omitempty"`
	Cgroups  []string `json:"cgroups,omitempty"` // a slot's cgroup directories
}

// dirsOf lists a sandbox cgroup's directories.
func dirsOf(cg *sandboxCgroup) []string {
	var out []string
	for _, d := range cg.Dirs {
		out = append(out, d)
	}
	return out
}

// existing returns those of dirs that exist.
func existing(dirs []string) []string {
	var out []string
	for _, d := range dirs {
		if _, err := os.Stat(d); err == nil {
			out = append(out, d)
		}
	}
	return out
}

// ownerMain creates two sandboxes, each with a background process and a
// double-forked daemon, reports them on stdout, then waits to be killed.
func ownerMain(stateDir string) {
	ctx := context.Background()
	b := New()
	js, _ := json.Marshal(map[string]any{"state_dir": stateDir})
	if d := b.Configure(ctx, schema.Config{Name: "owner", JSON: js}, core.SandboxSpec{}); d.HasErrors() {
		fmt.Println("ERR", d.Err())
		os.Exit(1)
	}
	for i := 0; i < 2; i++ {
		info, err := b.Create(ctx, core.SandboxSpec{Labels: map[string]string{"owner": "child"}})
		if err != nil {
			fmt.Println("ERR", err)
			os.Exit(1)
		}
		res, err := b.Exec(ctx, info.ID, core.ExecRequest{Command: sh("sleep 1000 >/dev/null 2>&1 & (setsid sh -c 'sleep 1000' >/dev/null 2>&1 &); echo $!"), Timeout: time.Minute})
		if err != nil || res.ExitCode != 0 {
			fmt.Println("ERR", err, res)
			os.Exit(1)
		}
		b.mu.Lock()
		nb := b.boxes[info.ID].impl.(*nsBox)
		b.mu.Unlock()
		out, _ := json.Marshal(ownedBox{ID: info.ID, InitPID: nb.pid, UID: nb.uid, BgPID: strings.TrimSpace(res.Stdout)})
		fmt.Println(string(out))
	}
	for b.Preparing() {
		time.Sleep(time.Millisecond)
	}
	b.slots.mu.Lock()
	for _, sl := range b.slots.ready {
		out, _ := json.Marshal(ownedBox{ID: sl.id, Prepared: true, Cgroups: dirsOf(sl.cg)})
		fmt.Println(string(out))
	}
	b.slots.mu.Unlock()
	fmt.Println("READY")
	select {}
}

// startOwner runs ownerMain in a child process and returns its sandboxes.
func startOwner(t *testing.T, stateDir string) (*exec.Cmd, []ownedBox) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), ownerEnv+"="+stateDir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	// Runs after the kill below (cleanups are LIFO): whatever the test
	// left, reap it so no cgroup outlives the temporary state dir.
	t.Cleanup(func() {
		b := New()
		js, _ := json.Marshal(map[string]any{"state_dir": stateDir})
		b.Configure(context.Background(), schema.Config{JSON: js}, core.SandboxSpec{})
		b.Shutdown(context.Background())
	})
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var boxes []ownedBox
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if line == "READY" {
			return cmd, boxes
		}
		var ob ownedBox
		if err := json.Unmarshal([]byte(line), &ob); err != nil {
			t.Fatalf("owner: %s", line)
		}
		boxes = append(boxes, ob)
	}
	t.Fatalf("owner exited early: %v", sc.Err())
	return nil, nil
}

// eventually polls cond; the deadline only bounds a hung test, it is not
// a speed assertion.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still not true after 20s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// procsOfUID lists host processes whose real uid is uid.
func procsOfUID(uid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" && f[1] == strconv.Itoa(uid) {
				out = append(out, pid)
			}
		}
	}
	return out
}

func cgroupDirsOf(id string) []string {
	m, _ := filepath.Glob("/sys/fs/cgroup/*/rlhost-" + id)
	n, _ := filepath.Glob("/sys/fs/cgroup/*/*/*/rlhost-" + id)
	o, _ := filepath.Glob("/sys/fs/cgroup/rlhost-" + id)
	return append(append(m, n...), o...)
}

func TestOwnerSIGKILLLeavesNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: per-sandbox host uids (used to find leftovers) need root")
	}
	state := t.TempDir()
	owner, all := startOwner(t, state)
	var boxes, prepared []ownedBox
	for _, ob := range all {
		if ob.Prepared {
			prepared = append(prepared, ob)
		} else {
			boxes = append(boxes, ob)
		}
	}
	if len(boxes) != 2 {
		t.Fatalf("owner made %d sandboxes", len(boxes))
	}
	if len(prepared) != slotsWanted {
		t.Fatalf("owner prepared %d slots, want %d: %+v", len(prepared), slotsWanted, prepared)
	}
	for _, ob := range prepared {
		if len(ob.Cgroups) == 0 || len(existing(ob.Cgroups)) != len(ob.Cgroups) {
			t.Fatalf("prepared slot %s: cgroups %v, existing %v", ob.ID, ob.Cgroups, existing(ob.Cgroups))
		}
	}
	for _, ob := range boxes {
		if len(procsOfUID(ob.UID)) < 3 {
			t.Fatalf("sandbox %s: expected init + background processes alive, got %v", ob.ID, procsOfUID(ob.UID))
		}
	}
	b := newBackend(t, map[string]any{"state_dir": state}, core.SandboxSpec{})
	list, err := b.List(context.Background(), map[string]string{"owner": "child"})
	if err != nil || len(list) != 2 || list[0].State != "running" {
		t.Fatalf("List while owner lives = %+v, %v", list, err)
	}
	// Destroy works on a live owner's sandbox.
	if err := b.Destroy(context.Background(), boxes[0].ID); err != nil {
		t.Fatalf("Destroy of another process's sandbox: %v", err)
	}
	eventually(t, "destroyed sandbox's processes gone", func() bool { return len(procsOfUID(boxes[0].UID)) == 0 })

	owner.Process.Signal(syscall.SIGKILL)
	owner.Wait()
	// PR_SET_PDEATHSIG on the init, and the PID namespace dying with it.
	eventually(t, "orphaned sandbox's processes gone", func() bool { return len(procsOfUID(boxes[1].UID)) == 0 })
	list, err = b.List(context.Background(), nil)
	if err != nil || len(list) != 1 || list[0].State != "orphaned" {
		t.Fatalf("List after owner death = %+v, %v", list, err)
	}
	// The next start reaps what is left: cgroup and directory.
	b2 := newBackend(t, map[string]any{"state_dir": state}, core.SandboxSpec{})
	if list, _ := b2.List(context.Background(), nil); len(list) != 0 {
		t.Fatalf("Configure did not reap: %+v", list)
	}
	for _, ob := range all {
		if d := append(cgroupDirsOf(ob.ID), existing(ob.Cgroups)...); len(d) != 0 {
			t.Errorf("cgroups left: %v", d)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(state, "sandboxes")); len(ents) != 0 {
		t.Errorf("state entries left: %v", ents)
	}
	checkNoHostMounts(t, state)
}

// A create prepares the next sandboxes' state entries and cgroups; the
// next create with the block's limits uses one, one with other limits
// does not, List never shows them, and Shutdown removes them.
func TestPreparedSlots(t *testing.T) {
	state := t.TempDir()
	b := newBackend(t, map[string]any{"state_dir": state}, core.SandboxSpec{})
	if b.cg.kind == cgroupOff {
		t.Skip("SKIP: no cgroups on this machine, so nothing is prepared")
	}
	var slotDirs []string // every slot's cgroup directories seen
	ready := func() []string {
		for b.Preparing() {
			time.Sleep(time.Millisecond)
		}
		b.slots.mu.Lock()
		defer b.slots.mu.Unlock()
		var ids []string
		for _, sl := range b.slots.ready {
			ids = append(ids, sl.id)
			slotDirs = append(slotDirs, dirsOf(sl.cg)...)
		}
		return ids
	}
	if ids := ready(); len(ids) != 0 {
		t.Fatalf("slots before any create: %v", ids)
	}
	first := create(t, b, core.SandboxSpec{})
	ids := ready()
	if len(ids) != slotsWanted {
		t.Fatalf("after a create, %d slots ready, want %d", len(ids), slotsWanted)
	}
	if len(slotDirs) == 0 || len(existing(slotDirs)) != len(slotDirs) {
		t.Errorf("slots' cgroups %v, existing %v", slotDirs, existing(slotDirs))
	}
	for _, id := range ids {
		if _, err := os.Stat(filepath.Join(state, "sandboxes", ".new-"+id, "lock")); err != nil {
			t.Errorf("slot %s: no locked state entry: %v", id, err)
		}
	}
	if list, err := b.List(context.Background(), nil); err != nil || len(list) != 1 || list[0].ID != first {
		t.Errorf("List shows slots: %+v, %v", list, err)
	}
	// Other limits: the cgroups must be made with them, not taken.
	other := create(t, b, core.SandboxSpec{Limits: core.Limits{MemoryBytes: 96 << 20}})
	for _, id := range ids {
		if other == id {
			t.Errorf("a create with other limits took slot %s", id)
		}
	}
	res := execOK(t, b, other, "cat", "/proc/self/cgroup")
	if b.cg.kind == cgroupV1 {
		lim, err := os.ReadFile(filepath.Join(b.cg.v1Base["memory"], "rlhost-"+other, cgroupCmds, "memory.limit_in_bytes"))
		if err != nil || strings.TrimSpace(string(lim)) != strconv.Itoa(96<<20) {
			t.Errorf("other limits: memory.limit_in_bytes = %q, %v (cgroups %s)", lim, err, res.Stdout)
		}
	}
	second := create(t, b, core.SandboxSpec{})
	if second != ids[0] && second != ids[1] {
		t.Errorf("create with the block's limits did not use a slot: %s, slots %v", second, ids)
	}
	execOK(t, b, second, "true")
	after := ready()
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, id := range append(append(ids, after...), first, other, second) {
		if d := cgroupDirsOf(id); len(d) != 0 {
			t.Errorf("cgroups left: %v", d)
		}
	}
	if d := existing(slotDirs); len(d) != 0 {
		t.Errorf("slots' cgroups left: %v", d)
	}
	if ents, _ := os.ReadDir(filepath.Join(state, "sandboxes")); len(ents) != 0 {
		t.Errorf("state entries left: %v", ents)
	}
}

// checkNoHostMounts fails if any mount in the host's namespace refers to
// the state dir or is one of the sandbox tmpfs mounts.
func checkNoHostMounts(t *testing.T, state string) {
	t.Helper()
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mi), "\n") {
		if strings.Contains(line, state) || strings.Contains(line, "rlhost-root") || strings.Contains(line, "rlhost-hidden") {
			t.Errorf("mount left on the host: %s", line)
		}
	}
}

func TestShutdownLeavesNothing(t *testing.T) {
	for _, ws := range []string{"tmpfs", "host"} {
		t.Run(ws, func(t *testing.T) {
			state := t.TempDir()
			os.Chmod(filepath.Dir(state), 0o711) // see searchableByOthers
			b := newBackend(t, map[string]any{"state_dir": state, "workspace": ws}, core.SandboxSpec{})
			var uids []int
			var ids []string
			for i := 0; i < 3; i++ {
				id := create(t, b, core.SandboxSpec{})
				execOK(t, b, id, "sh", "-c", "sleep 1000 >/dev/null 2>&1 & echo x > /workspace/f; echo y > /tmp/g")
				b.mu.Lock()
				uids = append(uids, b.boxes[id].impl.(*nsBox).uid)
				b.mu.Unlock()
				ids = append(ids, id)
			}
			if err := b.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			for i, uid := range uids {
				if os.Geteuid() == 0 {
					if p := procsOfUID(uid); len(p) != 0 {
						t.Errorf("processes left: %v", p)
					}
				}
				if d := cgroupDirsOf(ids[i]); len(d) != 0 {
					t.Errorf("cgroups left: %v", d)
				}
			}
			if ents, _ := os.ReadDir(filepath.Join(state, "sandboxes")); len(ents) != 0 {
				t.Errorf("state entries left: %v", ents)
			}
			checkNoHostMounts(t, state)
		})
	}
}

func TestPoolAndCaps(t *testing.T) {
	spec := core.SandboxSpec{Env: map[string]string{"A": "1"}}
	// Without recycling: a taken sandbox's place is refilled by a new one.
	b := newBackend(t, map[string]any{"pool_size": 2, "max_sandboxes": 3, "recycle": false}, spec)
	eventually(t, "pool filled", func() bool { return b.PoolLen() == 2 })
	ctx := context.Background()
	s1 := spec
	s1.Labels = map[string]string{"n": "1"}
	info, err := b.Create(ctx, s1)
	if err != nil {
		t.Fatal(err)
	}
	res := execOK(t, b, info.ID, "sh", "-c", "echo $A")
	if res.Stdout != "1\n" {
		t.Errorf("pooled sandbox env: %q", res.Stdout)
	}
	list, _ := b.List(ctx, map[string]string{"n": "1"})
	if len(list) != 1 || list[0].ID != info.ID {
		t.Errorf("List of pooled sandbox with new labels: %+v", list)
	}
	// max_sandboxes counts pooled ones too: 1 taken + refill up to the cap.
	eventually(t, "pool refilled to the cap", func() bool {
		return b.live.InUse() == 3
	})
	if _, err := b.Create(ctx, core.SandboxSpec{}); err == nil {
		// A different spec cannot use the pool; the cap is reached.
		t.Errorf("Create beyond max_sandboxes succeeded")
	}
}

// `rlhost plugins` prints these descriptions; they must use the names a job
// file uses (limits.disk), never core.Limits' JSON fields.
func TestSchemaNamesHCLSettings(t *testing.T) {
	var walk func(s schema.Spec)
	walk = func(s schema.Spec) {
		for _, a := range s.Attributes {
			if strings.Contains(a.Description, "_bytes") {
				t.Errorf("%s: description %q names a wire field", a.Name, a.Description)
			}
		}
		for _, b := range s.Blocks {
			walk(b.Spec)
		}
	}
	walk(New().Info().Config)
}

func TestConfigureRejects(t *testing.T) {
	cases := []struct {
		cfg  map[string]any
		spec core.SandboxSpec
		path string
	}{
		{nil, core.SandboxSpec{Image: "python:3.12"}, "image"},
		{map[string]any{"isolation": "gvisor"}, core.SandboxSpec{}, "isolation"},
		{map[string]any{"isolation": "none"}, core.SandboxSpec{Limits: core.Limits{MemoryBytes: 1 << 20}}, "limits.memory"},
		{map[string]any{"isolation": "none"}, core.SandboxSpec{Rootfs: "/"}, "rootfs"},
		{nil, core.SandboxSpec{Limits: core.Limits{DiskBytes: -1}}, "limits.disk"},
		{nil, core.SandboxSpec{Rootfs: "/does/not/exist"}, "rootfs"},
		{map[string]any{"workspace": "host"}, core.SandboxSpec{Limits: core.Limits{DiskBytes: 1 << 20}}, "limits.disk"},
		{map[string]any{"cgroup": "off"}, core.SandboxSpec{Limits: core.Limits{CPUs: 1}}, "limits.cpus"},
		{map[string]any{"pool_size": 5, "max_sandboxes": 2}, core.SandboxSpec{}, "pool_size"},
		{map[string]any{"cgroup": "v3"}, core.SandboxSpec{}, "cgroup"},
		{map[string]any{"helper": "/bin/true"}, core.SandboxSpec{}, "isolation"}, // not an init: the probe fails
		{nil, core.SandboxSpec{Limits: core.Limits{OutputBytes: 1 << 30}}, "limits.output"},
		{map[string]any{"root_view": "everything"}, core.SandboxSpec{}, "root_view"},
		{map[string]any{"seccomp": "strict"}, core.SandboxSpec{}, "seccomp"},
		{map[string]any{"recycle": true, "pool_size": 2, "isolation": "none"}, core.SandboxSpec{}, "recycle"},
		{map[string]any{"recycle": true, "pool_size": 2, "workspace": "host"}, core.SandboxSpec{}, "recycle"},
	}
	for _, c := range cases {
		cfg := c.cfg
		if cfg == nil {
			cfg = map[string]any{}
		}
		cfg["state_dir"] = t.TempDir()
		js, _ := json.Marshal(cfg)
		b := New()
		diags := b.Configure(context.Background(), schema.Config{JSON: js}, c.spec)
		found := false
		for _, d := range diags {
			if d.Severity == schema.Error && strings.Join(d.Path, ".") == c.path {
				found = true
			}
			// Users write limits.disk, not the wire name disk_bytes.
			if strings.Contains(d.Summary+d.Detail, "_bytes") {
				t.Errorf("diagnostic %q / %q names a wire field, not the HCL setting", d.Summary, d.Detail)
			}
		}
		if !found {
			t.Errorf("cfg %v spec %+v: want an error at %q, got %v", c.cfg, c.spec, c.path, diags)
		}
		b.Shutdown(context.Background())
	}
}

// A crash between creating the cgroup and writing meta.json leaves an entry
// with only a free lock; the reaper must still remove its cgroup.
func TestReapHalfCreated(t *testing.T) {
	state := t.TempDir()
	b := newBackend(t, map[string]any{"state_dir": state}, core.SandboxSpec{})
	if b.cg.kind == cgroupOff {
		t.Skip("SKIP: no cgroups on this machine")
	}
	id := newID()
	e, err := b.state.reserve(id)
	if err != nil {
		t.Fatal(err)
	}
	cg, err := b.cg.create(id, core.Limits{MemoryBytes: 64 << 20}, 16)
	if err != nil {
		t.Fatal(err)
	}
	e.lock.Close() // the owner "dies"
	if len(cgroupDirsOf(id)) == 0 {
		t.Fatalf("cgroup not created: %+v", cg)
	}
	reaped, err := b.ReapOrphans(context.Background())
	if err != nil || len(reaped) != 1 || reaped[0].ID != id {
		t.Fatalf("ReapOrphans = %+v, %v", reaped, err)
	}
	if d := cgroupDirsOf(id); len(d) != 0 {
		t.Errorf("cgroups left: %v", d)
	}
	if ents, _ := os.ReadDir(filepath.Join(state, "sandboxes")); len(ents) != 0 {
		t.Errorf("state entries left: %v", ents)
	}
}

// A helper that dies at start-up (one from another build speaks another
// protocol and exits) is named in the error, with what to do about it,
// rather than leaving an unexplained cgroup or socket error.
func TestHelperExitingAtStartIsNamed(t *testing.T) {
	for _, helper := range []string{"/bin/true", "/bin/false"} {
		t.Run(helper, func(t *testing.T) {
			js, _ := json.Marshal(map[string]any{"helper": helper, "state_dir": t.TempDir()})
			b := New()
			defer b.Shutdown(context.Background())
			diags := b.Configure(context.Background(), schema.Config{JSON: js}, core.SandboxSpec{})
			err := diags.Err()
			if err == nil || !strings.Contains(err.Error(), "the sandbox init "+helper+" exited during start-up") || !strings.Contains(err.Error(), "make build") {
				t.Fatalf("want an error naming %s as exited during start-up, got %v", helper, err)
			}
		})
	}
}

// Every signal a sandboxed program can send its PID 1, one after another,
// must leave the init serving: none may kill it, make it crash, or stop
// its commands from starting. Then the same once more from a command that
// sends all of them at once, while the init is busy with another command.
func TestInitSurvivesEverySignal(t *testing.T) {
	b := newBackend(t, nil, core.SandboxSpec{})
	id := create(t, b, core.SandboxSpec{})
	send := `import os, signal
for s in range(1, signal.SIGRTMAX + 1):
    try:
        os.kill(1, s)
    except OSError as e:
        print("signal", s, e)
print("sent")`
	for round := 0; round < 2; round++ {
		r := execOK(t, b, id, "python3", "-c", send)
		if strings.TrimSpace(r.Stdout) != "sent" {
			t.Fatalf("round %d: %q %q", round, r.Stdout, r.Stderr)
		}
		// The signals are asynchronous: give them time to arrive before
		// checking the init still answers.
		execOK(t, b, id, "sleep", "0.2")
		if r := execOK(t, b, id, "echo", "alive"); strings.TrimSpace(r.Stdout) != "alive" {
			t.Fatalf("round %d: the init answered %q", round, r.Stdout)
		}
	}
}
