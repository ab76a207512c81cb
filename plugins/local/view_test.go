package local

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
)

// newBackendAt is newBackend with the config file's directory set, so
// relative paths resolve against it.
func newBackendAt(t *testing.T, baseDir string, cfg map[string]any, spec core.SandboxSpec) *Backend {
	t.Helper()
	cfg["state_dir"] = t.TempDir()
	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b := New()
	if diags := b.Configure(context.Background(), schema.Config{Name: "test", JSON: js, BaseDir: baseDir}, spec); diags.HasErrors() {
		t.Fatalf("Configure: %v", diags.Err())
	}
	t.Cleanup(func() { b.Shutdown(context.Background()) })
	return b
}

// openToOthers makes dir and its parents searchable, as a job directory
// normally is (t.TempDir makes 0700 directories).
func openToOthers(t *testing.T, dir string) {
	t.Helper()
	for p := dir; p != "/"; p = filepath.Dir(p) {
		if st, err := os.Stat(p); err == nil && st.Mode().Perm()&0o005 != 0o005 {
			os.Chmod(p, st.Mode().Perm()|0o055)
		}
	}
}

// plant writes a world-readable secret file at p and removes it (and the
// directories made for it) when the test ends.
func plant(t *testing.T, p, secret string) {
	t.Helper()
	var made []string
	for d := filepath.Dir(p); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		made = append([]string{d}, made...)
	}
	for _, d := range made {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatalf("plant %s: %v", p, err)
		}
	}
	if err := os.WriteFile(p, []byte(secret), 0o644); err != nil {
		t.Fatalf("plant %s: %v", p, err)
	}
	t.Cleanup(func() {
		os.Remove(p)
		for i := len(made) - 1; i >= 0; i-- {
			os.Remove(made[i])
		}
	})
}

// TestRuntimeViewHidesHostFiles plants world-readable files where projects
// and data live and checks that model-written code cannot find them; the
// old whole-host view (root_view = "host") shows them, which proves the
// probe can see them when they are there.
func TestRuntimeViewHidesHostFiles(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: planting files under /home, /srv and /opt needs root")
	}
	tag := "rlhost-planted-" + newID()
	secret := "SECRET-" + tag
	// A job directory where projects and data often live (not /tmp, which
	// every sandbox covers with its own).
	jobDir, err := os.MkdirTemp("/mnt", "rlhost-job-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(jobDir) })
	openToOthers(t, jobDir)
	cwd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	planted := []string{
		"/home/" + tag + "/project/.env",
		"/srv/" + tag + ".txt",
		"/opt/" + tag + ".txt",
		"/var/tmp/" + tag + ".txt",
		filepath.Join(jobDir, tag+".txt"),
		filepath.Join(cwd, tag+".txt"),
	}
	for _, p := range planted {
		plant(t, p, secret)
	}
	// Everything the sandbox can see, searched by name and by content.
	search := "find / -path /proc -prune -o -name '" + tag + "*' -print 2>/dev/null; " +
		"grep -rl '" + secret + "' /home /srv /opt /var /etc /mnt /tmp " + jobDir + " " + cwd + " 2>/dev/null; " +
		"for f in " + strings.Join(planted, " ") + "; do cat $f 2>/dev/null; done; true"
	for _, view := range []string{"runtime", "host"} {
		t.Run(view, func(t *testing.T) {
			b := newBackendAt(t, jobDir, map[string]any{"root_view": view}, core.SandboxSpec{})
			id := create(t, b, core.SandboxSpec{})
			res, err := b.Exec(context.Background(), id, core.ExecRequest{Command: sh(search), Timeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			out := res.Stdout + res.Stderr
			for _, p := range planted {
				seen := strings.Contains(out, p)
				if view == "runtime" && seen {
					t.Errorf("planted %s visible in the runtime view", p)
				}
				// A checkout under /tmp sits where every sandbox mounts its own
				// /tmp, so even the whole-host view cannot show it.
				if view == "host" && !seen && !strings.HasPrefix(p, "/tmp/") {
					t.Errorf("planted %s not found in the host view: the probe is blind", p)
				}
			}
			if view == "runtime" && strings.Contains(out, secret) {
				t.Errorf("secret printed in the runtime view: %q", out)
			}
		})
	}
}

// TestRuntimeViewTools: the usual tools work in the default view, with a
// generated passwd and the host's name resolution and linker config.
func TestRuntimeViewTools(t *testing.T) {
	b := newBackend(t, nil, core.SandboxSpec{})
	id := create(t, b, core.SandboxSpec{})
	script := `set -e
python3 -c 'import json, ssl, sqlite3, subprocess; print(subprocess.run(["echo", "py"], capture_output=True, text=True).stdout.strip())'
bash -c 'echo bash'
sh -c 'echo sh'
echo cat | cat
echo grep | grep -o gre
echo sed | sed s/s/S/
whoami
getent hosts localhost | head -1 | cut -f1 -d' '
ls / | tr '\n' ' '
`
	res := execOK(t, b, id, "sh", "-c", script)
	want := []string{"py\n", "bash\n", "sh\n", "cat\n", "gre\n", "Sed\n", "root\n"}
	for _, w := range want {
		if !strings.Contains(res.Stdout, w) {
			t.Errorf("output lacks %q:\n%s", w, res.Stdout)
		}
	}
	// Nothing of the host's top level beyond the runtime.
	last := strings.Fields(res.Stdout[strings.LastIndex(strings.TrimSpace(res.Stdout), "\n")+1:])
	for _, name := range last {
		switch name {
		case "bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "run", "sbin", "sys", "tmp", "usr", "var", "workspace":
		default:
			t.Errorf("unexpected top-level entry /%s in the runtime view", name)
		}
	}
}

// TestMounts: mount blocks add host paths, relative to the config file,
// read-only unless writable; bad ones are refused at their block.
func TestMounts(t *testing.T) {
	jobDir := t.TempDir()
	openToOthers(t, jobDir)
	os.MkdirAll(filepath.Join(jobDir, "data", "sub"), 0o755)
	os.WriteFile(filepath.Join(jobDir, "data", "sub", "answers.txt"), []byte("42\n"), 0o644)
	os.Mkdir(filepath.Join(jobDir, "out"), 0o777)
	os.Chmod(filepath.Join(jobDir, "out"), 0o777) // the sandbox's uid is not the test's
	os.WriteFile(filepath.Join(jobDir, "single.txt"), []byte("one file\n"), 0o644)
	b := newBackendAt(t, jobDir, map[string]any{"mount": []map[string]any{
		{"source": "data", "target": "/data"},
		{"source": "out", "target": "/results", "writable": true},
		{"source": filepath.Join(jobDir, "single.txt"), "target": "/etc/extra/single.txt"},
	}}, core.SandboxSpec{})
	id := create(t, b, core.SandboxSpec{})
	res, err := b.Exec(context.Background(), id, core.ExecRequest{Command: sh(
		"cat /data/sub/answers.txt; cat /etc/extra/single.txt; touch /data/x 2>&1; echo w=$?; echo made > /results/made.txt; echo r=$?"), Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"42\n", "one file\n", "Read-only file system", "w=1", "r=0"} {
		if !strings.Contains(res.Stdout, w) {
			t.Errorf("output lacks %q: %+v", w, res)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(jobDir, "out", "made.txt")); string(got) != "made\n" {
		t.Errorf("writable mount: host file = %q", got)
	}
	if _, err := os.Stat(filepath.Join(jobDir, "data", "x")); err == nil {
		t.Errorf("read-only mount written through")
	}

	bad := []struct {
		mounts []map[string]any
		iso    string
		path   string
	}{
		{[]map[string]any{{"source": "data", "target": "/data"}, {"source": "missing"}}, "", "mount.1.source"},
		{[]map[string]any{{"source": "data", "target": "relative"}}, "", "mount.0.target"},
		{[]map[string]any{{"source": "data", "target": "/tmp/data"}}, "", "mount.0.target"},
		{[]map[string]any{{"source": "data", "target": "/workspace/data"}}, "", "mount.0.target"},
		{[]map[string]any{{"source": "data"}}, "none", "mount.0.source"},
		{[]map[string]any{{"source": "/", "target": "/host"}}, "", "mount.0.source"}, // holds the state dir
	}
	for _, c := range bad {
		cfg := map[string]any{"mount": c.mounts, "state_dir": t.TempDir()}
		if c.iso != "" {
			cfg["isolation"] = c.iso
		}
		js, _ := json.Marshal(cfg)
		nb := New()
		diags := nb.Configure(context.Background(), schema.Config{JSON: js, BaseDir: jobDir}, core.SandboxSpec{})
		found := false
		for _, d := range diags {
			if d.Severity == schema.Error && strings.Join(d.Path, ".") == c.path {
				found = true
			}
		}
		if !found {
			t.Errorf("mounts %v: want an error at %s, got %v", c.mounts, c.path, diags)
		}
		nb.Shutdown(context.Background())
	}
}

// TestRootfsStillWorks: a rootfs directory is shown whole, with mounts.
func TestRootfsStillWorks(t *testing.T) {
	rootfs := t.TempDir()
	openToOthers(t, rootfs)
	for _, d := range []string{"usr", "lib", "lib64", "bin", "sbin"} {
		if fi, err := os.Lstat("/" + d); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			target, _ := os.Readlink("/" + d)
			os.Symlink(target, filepath.Join(rootfs, d))
		} else {
			os.Mkdir(filepath.Join(rootfs, d), 0o755)
		}
	}
	os.Mkdir(filepath.Join(rootfs, "marker-dir"), 0o755)
	// The rootfs's /usr is the host's, bound by the test as a mount.
	spec := core.SandboxSpec{Rootfs: rootfs}
	b := newBackendAt(t, rootfs, map[string]any{"mount": []map[string]any{{"source": "/usr", "target": "/usr"}}}, spec)
	id := create(t, b, spec)
	res := execOK(t, b, id, "/bin/sh", "-c", "ls /; cat /etc/passwd 2>&1 | head -1")
	if !strings.Contains(res.Stdout, "marker-dir") || strings.Contains(res.Stdout, "root:x:0:0:root:/workspace") {
		t.Errorf("rootfs view: %q", res.Stdout)
	}
}

// TestInitSurvivesOOM: a command that lowers its oom_score_adj to the
// floor and then balloons is OOM-killed; the init, outside the commands'
// cgroup, lives on, and so does the sandbox.
func TestInitSurvivesOOM(t *testing.T) {
	spec := core.SandboxSpec{Limits: core.Limits{MemoryBytes: 64 << 20}}
	b := newBackend(t, nil, spec)
	if b.cg.kind == cgroupOff {
		t.Skip("SKIP: no cgroups on this machine")
	}
	id := create(t, b, spec)
	ctx := context.Background()
	b.mu.Lock()
	nb := b.boxes[id].impl.(*nsBox)
	b.mu.Unlock()
	initStart := procStart(nb.pid)

	// Commands run in the commands' cgroup, the init outside it.
	where := execOK(t, b, id, "cat", "/proc/self/cgroup")
	if !strings.Contains(where.Stdout, "rlhost-"+id+"/"+cgroupCmds+"\n") {
		t.Errorf("command not in rlhost-%s/%s:\n%s", id, cgroupCmds, where.Stdout)
	}
	for _, line := range strings.Split(strings.TrimSpace(where.Stdout), "\n") {
		if (strings.Contains(line, ":memory:") || strings.Contains(line, ":pids:") || strings.HasPrefix(line, "0::")) &&
			strings.Contains(line, "rlhost-"+id) && !strings.HasSuffix(line, "/"+cgroupCmds) {
			t.Errorf("command outside the commands' cgroup: %s", line)
		}
	}
	// The init as a process (its main thread) is never in it; checked on
	// a few inits, as which thread forks commands is up to the runtime.
	inits := []int{nb.pid}
	for i := 0; i < 8; i++ {
		other := create(t, b, spec)
		b.mu.Lock()
		inits = append(inits, b.boxes[other].impl.(*nsBox).pid)
		b.mu.Unlock()
	}
	for _, pid := range inits {
		own, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
		if strings.Contains(string(own), "/"+cgroupCmds+"\n") {
			t.Errorf("init %d inside the commands' cgroup:\n%s", pid, own)
		}
	}

	// Commands start as the OOM killer's first choice; the init raises
	// its own score for each fork through a file it opened at start-up.
	if adj := execOK(t, b, id, "cat", "/proc/self/oom_score_adj"); adj.Stdout != "1000\n" {
		t.Errorf("a command's oom_score_adj: %q, want 1000", adj.Stdout)
	}
	// The lowest score a command can reach (the init's own), then far
	// more memory than the limit.
	balloon := `echo 0 > /proc/self/oom_score_adj || exit 3
exec python3 -c 'b = bytearray(512 << 20); print(len(b))'`
	res, err := b.Exec(ctx, id, core.ExecRequest{Command: sh(balloon), Timeout: 20 * time.Second})
	if err != nil {
		t.Fatalf("exec: %v (the init died?)", err)
	}
	t.Logf("balloon: %s in %v; stderr %q", summary(res), res.Duration, res.Stderr)
	if !res.OOMKilled || res.ExitCode == 3 {
		t.Errorf("balloon not OOM-killed: %s %+v", summary(res), res)
	}
	if !nb.alive() || procStart(nb.pid) != initStart {
		t.Fatalf("the init died with its workload")
	}
	next := execOK(t, b, id, "sh", "-c", "echo still here")
	if next.Stdout != "still here\n" {
		t.Errorf("next exec: %+v", next)
	}
}

// TestCPUTimeReachesImmediateChildren: cpu_time is set before the command
// runs its first instruction, so children it forks at once inherit it.
func TestCPUTimeReachesImmediateChildren(t *testing.T) {
	for _, iso := range modes() {
		t.Run(iso, func(t *testing.T) {
			spec := core.SandboxSpec{Limits: core.Limits{CPUTime: time.Second}}
			b := newBackend(t, map[string]any{"isolation": iso}, spec)
			id := create(t, b, spec)
			ctx := context.Background()
			// The limit as a child forked first thing sees it.
			res := execOK(t, b, id, "sh", "-c", "cat /proc/self/limits & wait")
			if !strings.Contains(res.Stdout, "Max cpu time              1                    2                    seconds") {
				t.Errorf("child's limits:\n%s", res.Stdout)
			}
			// A busy child forked at once is stopped by RLIMIT_CPU, long
			// before the timeout.
			r, err := b.Exec(ctx, id, core.ExecRequest{Command: sh("while :; do :; done & wait $!"), Timeout: 30 * time.Second})
			if err != nil || r.TimedOut || (r.ExitCode != 128+24 && r.ExitCode != 128+9) {
				t.Errorf("busy child: %s %+v %v", summary(r), r, err)
			}
		})
	}
}
