package daytona

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path"
	"strings"
	"time"

	sdk "github.com/daytonaio/daytona/libs/sdk-go/pkg/daytona"
	"github.com/daytonaio/daytona/libs/sdk-go/pkg/options"
	"github.com/daytonaio/daytona/libs/sdk-go/pkg/types"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/sdk/sandboxplugin"
)

// only429 retries an exec only when the proxy refused it outright: any
// other failure may have run the command, and running it twice is wrong.
func only429(ctx context.Context, err error) bool {
	st, _ := apiStatus(err)
	return ctx.Err() == nil && st == http.StatusTooManyRequests
}

// Exec runs argv through the execute API (see exec.go for the wrapper).
//
// Timeouts: the request's timeout, rounded up to whole seconds, goes to
// the daemon, which kills the command's process group and answers HTTP 408.
// That 408, or the call outliving timeout + api_timeout, is reported as
// TimedOut, killed by SIGKILL (exit 137) like the local backend's timeouts,
// with no output: Daytona discards the output of a command it killed.
func (b *Backend) Exec(ctx context.Context, id string, req core.ExecRequest) (core.ExecResult, error) {
	s, err := b.ready()
	if err != nil {
		return core.ExecResult{}, err
	}
	ctx, done, err := b.bind(ctx)
	if err != nil {
		return core.ExecResult{}, err
	}
	defer done()
	h, workdir, err := b.handle(ctx, s, id)
	if err != nil {
		return core.ExecResult{}, err
	}
	limit := req.MaxOutputBytes
	if limit <= 0 {
		limit = b.outputCap(id, s.outputBytes)
	}
	dir := workdir
	if req.Dir != "" {
		if path.IsAbs(req.Dir) {
			dir = path.Clean(req.Dir)
		} else {
			dir = path.Join(workdir, req.Dir)
		}
	}
	secs := max(int(math.Ceil(req.TimeoutOrDefault().Seconds())), 1)

	sc := execScript{argv: req.Command, env: req.Env, stdin: req.Stdin, cap: limit, nonce: newNonce()}
	if err := sc.validate(); err != nil {
		return core.ExecResult{}, fmt.Errorf("daytona exec in %s: %w", id, err)
	}
	cmd := inlineCommand(sc.render())
	var scriptFile string
	if len(cmd) > maxInlineScriptBytes {
		// Too long for one argv string: ship the script as a file next to
		// the command's working directory and run it by relative path.
		sc.inFile = true
		file := ".rlhost-exec-" + sc.nonce + ".sh"
		err := withRetry(ctx, "upload exec script", b.opts(s), func(ctx context.Context) error {
			return h.FileSystem.UploadFile(ctx, []byte(sc.render()), path.Join(dir, file))
		})
		if err != nil {
			return core.ExecResult{}, err
		}
		cmd, scriptFile = "sh ./"+file, path.Join(dir, file)
	}

	callCtx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+s.apiTimeout)
	defer cancel()
	start := time.Now()
	var resp *types.ExecuteResponse
	err = withRetry(callCtx, "exec in "+id, callOpts{retries: s.maxRetries, retryIf: only429, log: b.log, api: s.apiURL}, func(c context.Context) error {
		r, err := h.Process.ExecuteCommand(c, cmd, options.WithCwd(dir), options.WithExecuteTimeout(time.Duration(secs)*time.Second))
		resp = r
		return err
	})
	dur := time.Since(start)
	res := core.ExecResult{Duration: dur, DurationMS: float64(dur) / float64(time.Millisecond), Isolation: isolationCloud}
	if err != nil {
		st, _ := apiStatus(err)
		if st == http.StatusRequestTimeout || (errors.Is(callCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil) {
			// Shaped like the local backend's timeouts: the daemon ends
			// the process group, with SIGKILL at the latest.
			res.ExitCode, res.Signal, res.TimedOut = 128+9, "SIGKILL", true
			return res, nil
		}
		if scriptFile != "" && only429(ctx, err) {
			// Never started, so the script did not delete itself.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.apiTimeout)
			h.FileSystem.DeleteFile(dctx, scriptFile, false)
			cancel()
		}
		return core.ExecResult{}, err
	}
	fr, perr := parseFrame(resp.Result, sc.nonce)
	if perr != nil {
		return core.ExecResult{}, fmt.Errorf("daytona exec in %s: %v (exit %d, output %s); the image needs sh, base64, mkfifo, mktemp, head and cat",
			id, perr, resp.ExitCode, excerpt(resp.Result))
	}
	res.ExitCode = fr.exitCode
	if int64(len(fr.stdout)) > limit {
		fr.stdout, res.OutputTruncated = fr.stdout[:limit], true
	}
	if int64(len(fr.stderr)) > limit {
		fr.stderr, res.OutputTruncated = fr.stderr[:limit], true
	}
	res.Stdout, res.Stderr = string(fr.stdout), string(fr.stderr)
	return res, nil
}

// resolve confines p to the workspace: relative paths are relative to it,
// absolute ones must lie inside it. Symlinks are not resolved here; the
// sandbox itself is the isolation boundary.
func resolve(workdir, p string) (string, error) {
	var abs string
	if path.IsAbs(p) {
		abs = path.Clean(p)
	} else {
		abs = path.Join(workdir, p)
	}
	if abs != workdir && !strings.HasPrefix(abs, workdir+"/") {
		return "", fmt.Errorf("%q: %w", p, core.ErrInvalidPath)
	}
	return abs, nil
}

// fileHandle resolves the sandbox and path of a file call.
func (b *Backend) fileHandle(ctx context.Context, id, p string) (settings, *sdk.Sandbox, string, error) {
	s, err := b.ready()
	if err != nil {
		return s, nil, "", err
	}
	h, workdir, err := b.handle(ctx, s, id)
	if err != nil {
		return s, nil, "", err
	}
	abs, err := resolve(workdir, p)
	if err != nil {
		return s, nil, "", fmt.Errorf("daytona sandbox %s: %w", id, err)
	}
	return s, h, abs, nil
}

// ReadFile downloads a file of at most maxBytes (default 16 MiB); a bigger
// one is an error wrapping core.ErrTooLarge.
func (b *Backend) ReadFile(ctx context.Context, id, p string, maxBytes int64) ([]byte, error) {
	ctx, done, err := b.bind(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	s, h, abs, err := b.fileHandle(ctx, id, p)
	if err != nil {
		return nil, err
	}
	if maxBytes <= 0 {
		maxBytes = defaultReadBytes
	}
	var info *types.FileInfo
	err = withRetry(ctx, "stat "+abs, b.opts(s), func(ctx context.Context) error {
		i, err := h.FileSystem.GetFileInfo(ctx, abs)
		info = i
		return err
	})
	if err != nil {
		return nil, err
	}
	if info.IsDirectory {
		return nil, fmt.Errorf("daytona read %s: is a directory", abs)
	}
	if info.Size > maxBytes {
		return nil, fmt.Errorf("daytona read %s: %d bytes > %d: %w", abs, info.Size, maxBytes, core.ErrTooLarge)
	}
	var data []byte
	err = withRetry(ctx, "read "+abs, b.opts(s), func(ctx context.Context) error {
		rc, err := h.FileSystem.DownloadFileStream(ctx, abs)
		if err != nil {
			return err
		}
		defer rc.Close()
		data, err = io.ReadAll(io.LimitReader(rc, maxBytes+1))
		return err
	})
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > maxBytes {
		return nil, fmt.Errorf("daytona read %s: more than %d bytes: %w", abs, maxBytes, core.ErrTooLarge)
	}
	return data, nil
}

// WriteFile uploads data (parent directories are created) and sets mode.
func (b *Backend) WriteFile(ctx context.Context, id, p string, data []byte, mode uint32) error {
	ctx, done, err := b.bind(ctx)
	if err != nil {
		return err
	}
	defer done()
	s, h, abs, err := b.fileHandle(ctx, id, p)
	if err != nil {
		return err
	}
	upload := func(ctx context.Context) error { return h.FileSystem.UploadFile(ctx, data, abs) }
	if len(data) == 0 {
		// The generated toolbox client leaves an empty file out of the
		// multipart body, and the daemon answers 400: make it with sh.
		upload = func(ctx context.Context) error { return emptyFile(ctx, h, abs, s.apiTimeout) }
	}
	err = withRetry(ctx, "write "+abs, b.opts(s), upload)
	if err != nil {
		return err
	}
	if mode == 0 {
		return nil
	}
	perm := fmt.Sprintf("%04o", os.FileMode(mode).Perm())
	return withRetry(ctx, "chmod "+abs, b.opts(s), func(ctx context.Context) error {
		return h.FileSystem.SetFilePermissions(ctx, abs, options.WithPermissionMode(perm))
	})
}

// emptyFile creates (or truncates) the empty file abs, and its parents.
func emptyFile(ctx context.Context, h *sdk.Sandbox, abs string, timeout time.Duration) error {
	dir := path.Dir(abs)
	if err := h.FileSystem.CreateFolder(ctx, dir, options.WithMode("0755")); err != nil {
		return err
	}
	secs := max(int(math.Ceil(timeout.Seconds())), 1)
	resp, err := h.Process.ExecuteCommand(ctx, inlineCommand(": > "+sandboxplugin.ShellQuote(path.Base(abs))),
		options.WithCwd(dir), options.WithExecuteTimeout(time.Duration(secs)*time.Second))
	if err != nil {
		return err
	}
	if resp.ExitCode != 0 {
		return fmt.Errorf("create empty file %s: exit %d: %s", abs, resp.ExitCode, excerpt(resp.Result))
	}
	return nil
}

// ListFiles lists a directory. Paths come back in the form given: relative
// to the workspace for a relative p, absolute for an absolute one.
func (b *Backend) ListFiles(ctx context.Context, id, p string) ([]core.FileInfo, error) {
	ctx, done, err := b.bind(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	s, h, abs, err := b.fileHandle(ctx, id, p)
	if err != nil {
		return nil, err
	}
	var list []*types.FileInfo
	err = withRetry(ctx, "list "+abs, b.opts(s), func(ctx context.Context) error {
		l, err := h.FileSystem.ListFiles(ctx, abs)
		list = l
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]core.FileInfo, 0, len(list))
	for _, f := range list {
		name := path.Join(p, f.Name)
		if p == "" {
			name = f.Name
		}
		out = append(out, core.FileInfo{
			Path: name, Size: f.Size, Mode: parseModeString(f.Mode, f.IsDirectory),
			IsDir: f.IsDirectory, ModTime: f.ModifiedTime,
		})
	}
	return out, nil
}

// parseModeString turns Go's FileMode.String form ("-rw-r--r--",
// "drwxr-xr-x", "dtrwxrwxrwx"), which the daemon sends, into mode bits:
// the permission bits from the last nine characters, plus os.ModeDir.
func parseModeString(m string, isDir bool) uint32 {
	var mode os.FileMode
	if isDir {
		mode |= os.ModeDir
	}
	if len(m) < 9 {
		return uint32(mode)
	}
	perm := m[len(m)-9:]
	for i := 0; i < 9; i++ {
		if perm[i] != '-' {
			mode |= 1 << (8 - i)
		}
	}
	return uint32(mode)
}
