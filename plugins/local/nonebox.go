package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/plugins/local/confine"
	"github.com/rlhost/rlhost/plugins/local/sandboxinit"
)

// noneBox runs commands directly on the host for isolation = "none": each
// exec in its own process group, a timeout kills the group, output capped.
// Its workspace is a host directory in the state dir.
type noneBox struct {
	entry *entry // its dir moves once, when the sandbox is published
	root  *confine.Root

	mu    sync.Mutex
	pgids map[int]bool // process groups started, killed on stop
}

func newNoneBox(e *entry) (*noneBox, error) {
	ws := filepath.Join(e.dir, "workspace")
	if err := os.Mkdir(ws, 0o700); err != nil {
		return nil, fmt.Errorf("none sandbox: workspace: %w", err)
	}
	root, err := confine.Open(ws, core.DefaultWorkdir)
	if err != nil {
		return nil, err
	}
	return &noneBox{entry: e, root: root, pgids: map[int]bool{}}, nil
}

// hostPath maps a sandbox path (/workspace/...) onto the host workspace.
func (b *noneBox) hostPath(p string) string {
	ws := filepath.Join(b.entry.dir, "workspace")
	switch {
	case p == "":
		return ws
	case p == core.DefaultWorkdir || strings.HasPrefix(p, core.DefaultWorkdir+"/"):
		return ws + p[len(core.DefaultWorkdir):]
	case !filepath.IsAbs(p):
		return filepath.Join(ws, p)
	}
	return p
}

type trackingStarter struct {
	sandboxinit.DirectStarter
	b *noneBox
}

func (t trackingStarter) Start(argv0 string, argv []string, attr *syscall.ProcAttr, atExec func(int) error) (int, sandboxinit.WaitFunc, error) {
	pid, wait, err := t.DirectStarter.Start(argv0, argv, attr, atExec)
	if err == nil {
		t.b.mu.Lock()
		t.b.pgids[pid] = true
		t.b.mu.Unlock()
	}
	return pid, wait, err
}

func (b *noneBox) exec(ctx context.Context, s sandboxinit.ExecSpec) (core.ExecResult, error) {
	s.Dir = b.hostPath(s.Dir)
	for i, kv := range s.Env {
		if v, ok := strings.CutPrefix(kv, "HOME="); ok {
			s.Env[i] = "HOME=" + b.hostPath(v)
		}
	}
	res, err := sandboxinit.Run(ctx, s, trackingStarter{b: b}, "none", nil)
	// Forget groups with no members left, so stop never signals a reused pgid.
	b.mu.Lock()
	for pg := range b.pgids {
		if syscall.Kill(-pg, 0) == syscall.ESRCH {
			delete(b.pgids, pg)
		}
	}
	b.mu.Unlock()
	return res, err
}

func (b *noneBox) readFile(_ context.Context, p string, max int64) ([]byte, error) {
	return b.root.ReadFile(p, max)
}

func (b *noneBox) writeFile(_ context.Context, p string, data []byte, mode uint32, max int64) error {
	return b.root.WriteFile(p, data, mode, max)
}

func (b *noneBox) list(_ context.Context, p string) ([]core.FileInfo, error) {
	return b.root.List(p, sandboxinit.MaxListEntries)
}

func (b *noneBox) alive() bool { return true }

func (b *noneBox) stop() error {
	b.mu.Lock()
	for pg := range b.pgids {
		syscall.Kill(-pg, syscall.SIGKILL)
	}
	b.pgids = map[int]bool{}
	b.mu.Unlock()
	return b.root.Close()
}
