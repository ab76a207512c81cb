package local

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
)

// rootlessEnv makes the test binary run rootlessMain: the backend as an
// unprivileged user, where cgroups are not delegated.
const rootlessEnv = "RLHOST_LOCAL_TEST_ROOTLESS"

func rootlessMain(stateDir string) {
	ctx := context.Background()
	conf := func(cfg map[string]any) (*Backend, schema.Diagnostics) {
		cfg["state_dir"] = stateDir
		js, _ := json.Marshal(cfg)
		b := New()
		return b, b.Configure(ctx, schema.Config{JSON: js}, core.SandboxSpec{})
	}
	_, d := conf(map[string]any{})
	fmt.Printf("DEFAULT %s\n", strings.ReplaceAll(fmt.Sprint(d.Err()), "\n", " "))
	b, d := conf(map[string]any{"cgroup": "off"})
	if d.HasErrors() {
		fmt.Printf("OFF-ERR %v\n", d.Err())
		return
	}
	for _, x := range d {
		fmt.Printf("OFF-WARN %s: %s\n", strings.Join(x.Path, "."), x.Summary)
	}
	info, err := b.Create(ctx, core.SandboxSpec{})
	if err != nil {
		fmt.Printf("CREATE-ERR %v\n", err)
		return
	}
	r, err := b.Exec(ctx, info.ID, core.ExecRequest{Command: sh("id -u; cat /proc/self/uid_map; touch /etc/x 2>&1; echo hi > /workspace/f && cat /workspace/f")})
	fmt.Printf("EXEC %q %v\n", r.Stdout, err)
	b.Shutdown(ctx)
}

func TestRootlessDegradesLoudly(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: needs root to drop to another user")
	}
	if b, _ := os.ReadFile("/proc/sys/kernel/unprivileged_userns_clone"); strings.TrimSpace(string(b)) == "0" {
		t.Skip("SKIP: unprivileged user namespaces are disabled on this kernel")
	}
	// The test binary must be reachable for an unprivileged user.
	dir := t.TempDir()
	for p := dir; p != "/"; p = filepath.Dir(p) {
		if st, err := os.Stat(p); err == nil && st.Mode().Perm()&0o001 == 0 {
			os.Chmod(p, st.Mode().Perm()|0o011)
		}
	}
	exe, _ := os.Executable()
	bin := filepath.Join(dir, "local.test")
	copyFile(t, exe, bin)
	state := filepath.Join(dir, "state")
	os.Mkdir(state, 0o777)
	os.Chown(state, 65534, 65534)
	cmd := exec.Command(bin)
	cmd.Env = []string{rootlessEnv + "=" + state, "HOME=/nonexistent"}
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	t.Logf("rootless run:\n%s", out)
	if err != nil {
		t.Fatalf("rootless child: %v", err)
	}
	s := string(out)
	if !strings.Contains(s, "DEFAULT ") || !strings.Contains(s, `cgroup = "off"`) {
		t.Errorf("default config did not refuse naming cgroup = \"off\"")
	}
	if !strings.Contains(s, "OFF-WARN cgroup:") {
		t.Errorf("cgroup = \"off\" did not warn")
	}
	// %q output: root inside, mapped to the caller's own uid (65534).
	if !strings.Contains(s, `EXEC "0\n         0      65534          1\n`) || !strings.Contains(s, "Read-only") || !strings.Contains(s, `hi\n"`) {
		t.Errorf("rootless sandbox did not work as expected")
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
