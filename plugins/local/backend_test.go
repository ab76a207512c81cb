package local

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/plugins/local/sandboxinit"
)

func modes() []string { return []string{"none", "namespaces"} }

func TestBasicLifecycle(t *testing.T) {
	for _, iso := range modes() {
		t.Run(iso, func(t *testing.T) {
			t.Setenv("OPENAI_API_KEY", "sk-host-secret")
			b := newBackend(t, map[string]any{"isolation": iso}, core.SandboxSpec{})
			spec := core.SandboxSpec{Env: map[string]string{"GREETING": "hi"}, Labels: map[string]string{"rlhost.run": "r1"}}
			id := create(t, b, spec)
			res := execOK(t, b, id, "sh", "-c", "echo $GREETING; env; pwd")
			if res.Isolation != iso {
				t.Errorf("Isolation = %q; want %q", res.Isolation, iso)
			}
			if !strings.HasPrefix(res.Stdout, "hi\n") || strings.Contains(res.Stdout, "sk-host-secret") || strings.Contains(res.Stdout, sandboxinit.RoleEnv) {
				t.Errorf("env leaked or missing: %q", res.Stdout)
			}
			if err := b.WriteFile(context.Background(), id, "dir/f.txt", []byte("data"), 0o644); err != nil {
				t.Fatal(err)
			}
			res = execOK(t, b, id, "cat", "dir/f.txt")
			if res.Stdout != "data" {
				t.Errorf("cat = %q", res.Stdout)
			}
			execOK(t, b, id, "sh", "-c", "echo made > made.txt")
			got, err := b.ReadFile(context.Background(), id, "/workspace/made.txt", 0)
			if err != nil || string(got) != "made\n" {
				t.Errorf("ReadFile = %q, %v", got, err)
			}
			files, err := b.ListFiles(context.Background(), id, "")
			if err != nil || len(files) != 2 {
				t.Errorf("ListFiles = %+v, %v", files, err)
			}
			list, err := b.List(context.Background(), map[string]string{"rlhost.run": "r1"})
			if err != nil || len(list) != 1 || list[0].ID != id || list[0].State != "running" {
				t.Errorf("List = %+v, %v", list, err)
			}
			if list, _ := b.List(context.Background(), map[string]string{"rlhost.run": "other"}); len(list) != 0 {
				t.Errorf("List(other) = %+v", list)
			}
			if err := b.Destroy(context.Background(), id); err != nil {
				t.Fatal(err)
			}
			if err := b.Destroy(context.Background(), id); !errors.Is(err, core.ErrNotFound) {
				t.Errorf("second Destroy = %v; want ErrNotFound", err)
			}
			if _, err := b.Exec(context.Background(), id, core.ExecRequest{Command: []string{"true"}}); !errors.Is(err, core.ErrNotFound) {
				t.Errorf("Exec after Destroy = %v", err)
			}
		})
	}
}

func TestExecLimits(t *testing.T) {
	for _, iso := range modes() {
		t.Run(iso, func(t *testing.T) {
			b := newBackend(t, map[string]any{"isolation": iso}, core.SandboxSpec{})
			id := create(t, b, core.SandboxSpec{})
			ctx := context.Background()
			res, err := b.Exec(ctx, id, core.ExecRequest{Command: sh("sleep 30 & sleep 30; echo never"), Timeout: 300 * time.Millisecond})
			if err != nil || !res.TimedOut || strings.Contains(res.Stdout, "never") {
				t.Errorf("timeout: %+v %v", res, err)
			}
			res, err = b.Exec(ctx, id, core.ExecRequest{Command: sh("head -c 3000000 /dev/zero; head -c 10 /dev/zero >&2"), MaxOutputBytes: 1000})
			if err != nil || !res.OutputTruncated || len(res.Stdout) != 1000 || len(res.Stderr) != 10 {
				t.Errorf("output cap: truncated=%v len=%d/%d err=%v", res.OutputTruncated, len(res.Stdout), len(res.Stderr), err)
			}
			res, err = b.Exec(ctx, id, core.ExecRequest{Command: sh("exit 7")})
			if err != nil || res.ExitCode != 7 {
				t.Errorf("exit code: %+v %v", res, err)
			}
			res, err = b.Exec(ctx, id, core.ExecRequest{Command: []string{"no-such-command-xyz"}})
			if err != nil || res.ExitCode != 127 {
				t.Errorf("missing command: %+v %v", res, err)
			}
			res, err = b.Exec(ctx, id, core.ExecRequest{Command: []string{"cat"}, Stdin: []byte("from stdin")})
			if err != nil || res.Stdout != "from stdin" {
				t.Errorf("stdin: %+v %v", res, err)
			}
			res, err = b.Exec(ctx, id, core.ExecRequest{Command: sh("kill -SEGV $$")})
			if err != nil || res.Signal != "SIGSEGV" || res.ExitCode != 128+11 {
				t.Errorf("signal: %+v %v", res, err)
			}
		})
	}
}
