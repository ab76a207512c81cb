package aviato

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/retry"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/core/sdk/pluginbase"
	"github.com/rlhost/rlhost/core/sdk/sandboxplugin"
	pb "github.com/rlhost/rlhost/plugins/aviato/aviatopb"
	"github.com/rlhost/rlhost/plugins/backendkit/inflight"
	"github.com/rlhost/rlhost/plugins/backendkit/pace"
	"github.com/rlhost/rlhost/plugins/backendkit/procowner"
	"github.com/rlhost/rlhost/plugins/backendkit/statedir"
)

// Backend is the aviato sandbox backend. The zero value is not usable; call
// New, then Configure.
type Backend struct {
	getenv func(string) string

	mu       sync.Mutex
	set      settings
	conn     *grpc.ClientConn
	rpc      pb.ATCServiceClient
	owner    procowner.Owner
	live     map[string]core.SandboxInfo // created by this process, by id
	output   map[string]int64            // their limits.output: the exec default cap
	starting *pace.Cap                   // max_starting
	pace     *pace.Pacer
	gate     *inflight.Gate // Creates in progress, for Shutdown
}

var _ sandboxplugin.Backend = (*Backend)(nil)

// New returns an unconfigured backend that reads credentials from the
// process environment.
func New() *Backend {
	return &Backend{getenv: os.Getenv, live: map[string]core.SandboxInfo{}, output: map[string]int64{}, gate: inflight.New()}
}

// Info describes the backend and its settings.
func (b *Backend) Info() pluginbase.Info {
	return pluginbase.Info{
		Name: backendName, Version: backendVersion, Kind: pluginbase.KindSandbox,
		Description: "Aviato (CoreWeave Sandbox) cloud sandboxes over the service's gRPC API",
		Config:      configSpec(),
	}
}

// Configure validates the block, connects, and proves the credentials and
// the endpoint with one List call, so a bad key or an unreachable service
// fails the start instead of the first episode.
func (b *Backend) Configure(ctx context.Context, cfg schema.Config, spec core.SandboxSpec) schema.Diagnostics {
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return schema.Diagnostics{schema.Errorf(nil, "invalid aviato backend config", "%v", err)}
	}
	set, diags := validate(c, spec, cfg.RunID, b.getenv)
	if diags.HasErrors() {
		return diags
	}
	if set.stateDir == "" {
		set.stateDir = statedir.PerUser("aviato")
	} else {
		set.stateDir = cfg.Path(set.stateDir)
	}
	tc := insecure.NewCredentials()
	if set.secure {
		tc = credentials.NewClientTLSFromCert(nil, "")
	}
	conn, err := grpc.NewClient(set.target, grpc.WithTransportCredentials(tc),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(100<<20), grpc.MaxCallSendMsgSize(100<<20)))
	if err != nil {
		return append(diags, schema.Errorf([]string{"api_url"}, "cannot connect to Aviato", "%s: %v", set.baseURL, err))
	}
	b.mu.Lock()
	if b.conn != nil {
		b.conn.Close()
	}
	b.set, b.conn, b.rpc, b.owner = set, conn, pb.NewATCServiceClient(conn), procowner.Current()
	b.starting = pace.NewCap(set.maxStarting)
	b.pace = pace.NewPacer(set.createRate)
	b.mu.Unlock()

	err = b.call(ctx, "probe", 0, func(ctx context.Context) error {
		_, err := b.rpc.List(b.authed(ctx), &pb.ListSandboxesRequest{Tags: []string{managedTag, ownerTag(b.owner)}})
		return err
	})
	switch {
	case errors.Is(err, errAuth):
		return append(diags, schema.Errorf([]string{"api_key"}, "Aviato rejected the credentials", "%s answered: %v", set.baseURL, err))
	case err != nil:
		return append(diags, schema.Errorf([]string{"api_url"}, "cannot reach Aviato", "%s: %v", set.baseURL, err))
	}
	if err := writeRecord(set.stateDir, record{Owner: b.owner, BaseURL: set.baseURL}); err != nil {
		return append(diags, schema.Errorf([]string{"state_dir"}, "state dir unusable", "%v", err))
	}
	// The host does not sweep at start; every backend does it itself.
	if _, err := b.ReapOrphans(ctx); err != nil {
		diags = append(diags, schema.Diagnostic{Severity: schema.Warning, Summary: "deleting orphaned Aviato sandboxes failed", Detail: err.Error()})
	}
	return diags
}

// authed attaches the credentials to a call's metadata.
func (b *Backend) authed(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, b.set.auth...)
}

func (b *Backend) ready() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.rpc == nil:
		return errors.New("aviato backend is not configured")
	case b.gate.Closed():
		return fmt.Errorf("aviato backend: %w", inflight.ErrClosed)
	}
	return nil
}

// tagsOf turns labels into the service's string tags, "key=value".
func tagsOf(labels map[string]string) []string {
	out := make([]string, 0, len(labels))
	for k, v := range labels {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// Create starts a sandbox, waits until it is RUNNING and makes its
// workspace. A sandbox that fails on the way is deleted.
func (b *Backend) Create(ctx context.Context, spec core.SandboxSpec) (core.SandboxInfo, error) {
	if err := b.ready(); err != nil {
		return core.SandboxInfo{}, err
	}
	set, d := b.set.withSpec(spec, &diagnoser{})
	if d.HasErrors() {
		return core.SandboxInfo{}, fmt.Errorf("aviato create: %w", d.Err())
	}
	// Shutdown cancels and waits for creates in progress before it lists
	// what to delete, so none slips past it.
	ctx, done, err := b.gate.Enter(ctx)
	if err != nil {
		return core.SandboxInfo{}, fmt.Errorf("aviato backend: %w", err)
	}
	defer done()
	if err := b.starting.Take(ctx); err != nil {
		return core.SandboxInfo{}, err
	}
	defer b.starting.Put()
	if err := b.pace.Wait(ctx); err != nil {
		return core.SandboxInfo{}, err
	}
	labels := map[string]string{}
	for k, v := range set.labels {
		labels[k] = v
	}
	tags := append(tagsOf(labels), managedTag, ownerTag(b.owner))
	if _, ok := labels[runTagKey]; !ok && set.runID != "" {
		tags = append(tags, runTagKey+"="+set.runID)
	}
	req := &pb.StartSandboxRequest{
		Command:              "/bin/sh",
		Args:                 []string{"-c", `trap "exit 0" TERM INT; sleep infinity & wait`},
		ContainerImage:       set.image,
		Tags:                 tags,
		EnvironmentVariables: set.env,
		MaxLifetimeSeconds:   set.lifetime,
		Network:              &pb.NetworkOptions{EgressMode: set.egress},
	}
	if set.cpu != "" || set.memory != "" {
		req.ResourceLimits = &pb.ResourceRequest{Cpu: set.cpu, Memory: set.memory}
	}
	var resp *pb.StartSandboxResponse
	err = b.call(ctx, "start sandbox", set.maxRetries, func(ctx context.Context) error {
		var err error
		resp, err = b.rpc.Start(b.authed(ctx), req)
		return err
	})
	if err != nil {
		return core.SandboxInfo{}, err
	}
	id := resp.GetSandboxId()
	info := core.SandboxInfo{ID: id, Backend: backendName, Labels: labels, State: "running", CreatedAt: time.Now().UTC(), Isolation: isolationCloud}
	b.mu.Lock()
	b.live[id], b.output[id] = info, set.outputBytes
	b.mu.Unlock()
	fail := func(err error) (core.SandboxInfo, error) {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.set.apiTimeout)
		defer cancel()
		_ = b.Destroy(dctx, id)
		return core.SandboxInfo{}, err
	}
	if err := b.waitRunning(ctx, id); err != nil {
		return fail(err)
	}
	res, err := b.Exec(ctx, id, core.ExecRequest{Command: []string{"mkdir", "-p", "--", set.workdir}, Dir: "/", Timeout: b.set.apiTimeout})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %s", res.ExitCode, strings.TrimSpace(res.Stderr))
	}
	if err != nil {
		return fail(fmt.Errorf("aviato sandbox %s: make workspace %s: %w", id, set.workdir, err))
	}
	return info, nil
}

// waitRunning polls Get as the client does (0.2 s growing by 1.5x to 2 s)
// until the sandbox is RUNNING or cannot become so.
func (b *Backend) waitRunning(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, b.set.startTimeout)
	defer cancel()
	poll := 200 * time.Millisecond
	for {
		var st pb.SandboxStatus
		err := b.call(ctx, "get sandbox", b.set.maxRetries, func(ctx context.Context) error {
			r, err := b.rpc.Get(b.authed(ctx), &pb.GetSandboxRequest{SandboxId: id})
			st = r.GetSandboxStatus()
			return err
		})
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("aviato sandbox %s not RUNNING within %s: %w", id, b.set.startTimeout, context.DeadlineExceeded)
			}
			return err
		}
		switch st {
		case pb.SandboxStatus_SANDBOX_STATUS_RUNNING:
			return nil
		case pb.SandboxStatus_SANDBOX_STATUS_PENDING, pb.SandboxStatus_SANDBOX_STATUS_CREATING:
		default:
			return fmt.Errorf("aviato sandbox %s is %s, not RUNNING", id, strings.TrimPrefix(st.String(), "SANDBOX_STATUS_"))
		}
		if retry.Sleep(ctx, poll) != nil {
			return fmt.Errorf("aviato sandbox %s not RUNNING within %s: %w", id, b.set.startTimeout, context.DeadlineExceeded)
		}
		poll = min(time.Duration(float64(poll)*1.5), 2*time.Second)
	}
}

// resolve makes a sandbox path absolute: relative ones are under workdir.
func (b *Backend) resolve(p string) (string, error) {
	if p == "" {
		p = "."
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("path contains a NUL byte: %w", core.ErrInvalidPath)
	}
	if !path.IsAbs(p) {
		p = path.Join(b.set.workdir, p)
	}
	return path.Clean(p), nil
}

// resolveFile is resolve for the file calls, which are confined to the
// workspace as on every backend: a path that leaves it (by "..", or an
// absolute one elsewhere) is refused before the service sees it.
func (b *Backend) resolveFile(p string) (string, error) {
	abs, err := b.resolve(p)
	if err != nil {
		return "", err
	}
	ws := path.Clean(b.set.workdir)
	if abs != ws && !strings.HasPrefix(abs, ws+"/") && ws != "/" {
		return "", fmt.Errorf("%q is outside the workspace %s: %w", p, ws, core.ErrInvalidPath)
	}
	return abs, nil
}

// Exec runs argv through the exec script (exec.go).
func (b *Backend) Exec(ctx context.Context, id string, req core.ExecRequest) (core.ExecResult, error) {
	if err := b.ready(); err != nil {
		return core.ExecResult{}, err
	}
	if err := sandboxplugin.CheckArgv(req.Command, req.Env); err != nil {
		return core.ExecResult{}, fmt.Errorf("aviato exec: %w", err)
	}
	dir, err := b.resolve(req.Dir)
	if err != nil {
		return core.ExecResult{}, err
	}
	timeout := req.TimeoutOrDefault()
	limit := req.MaxOutputBytes
	if limit <= 0 {
		b.mu.Lock()
		limit = b.output[id]
		b.mu.Unlock()
	}
	if limit <= 0 {
		limit = b.set.outputBytes
	}
	script := execScript{dir: dir, env: req.Env, cap: limit}
	if len(req.Stdin) > maxInlineStdin {
		script.stdinFile = path.Join(b.set.workdir, ".rlhost-stdin-"+newNonce())
		if err := b.WriteFile(ctx, id, script.stdinFile, req.Stdin, 0o600); err != nil {
			return core.ExecResult{}, fmt.Errorf("aviato exec: upload stdin: %w", err)
		}
	} else {
		script.stdin = req.Stdin
	}
	secs := int32(min(math.Ceil(timeout.Seconds()), math.MaxInt32-60))
	start := time.Now()
	// The service enforces the timeout; the call's own deadline only
	// catches a service that does not.
	cctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+b.set.apiTimeout)
	defer cancel()
	r, err := b.rpc.Exec(b.authed(cctx), &pb.ExecSandboxRequest{SandboxId: id, Command: script.command(req.Command), MaxTimeoutSeconds: secs})
	res := core.ExecResult{Duration: time.Since(start), Isolation: isolationCloud}
	res.DurationMS = float64(res.Duration) / float64(time.Millisecond)
	if err != nil {
		if status.Code(err) == codes.DeadlineExceeded && ctx.Err() == nil {
			res.TimedOut, res.ExitCode = true, -1
			return res, nil
		}
		return core.ExecResult{}, classify("exec in sandbox "+id, err)
	}
	out := r.GetResult()
	var t1, t2 bool
	res.ExitCode = int(out.GetExitCode())
	res.Stdout, t1 = capOutput(out.GetStdout(), limit)
	res.Stderr, t2 = capOutput(out.GetStderr(), limit)
	res.OutputTruncated = t1 || t2
	return res, nil
}

// ReadFile reads a whole file with RetrieveFile.
func (b *Backend) ReadFile(ctx context.Context, id, p string, maxBytes int64) ([]byte, error) {
	if err := b.ready(); err != nil {
		return nil, err
	}
	abs, err := b.resolveFile(p)
	if err != nil {
		return nil, err
	}
	if maxBytes <= 0 {
		maxBytes = defaultReadBytes
	}
	var r *pb.RetrieveFileSandboxResponse
	err = b.call(ctx, "read "+abs+" in sandbox "+id, b.set.maxRetries, func(ctx context.Context) error {
		var err error
		r, err = b.rpc.RetrieveFile(b.authed(ctx), &pb.RetrieveFileSandboxRequest{SandboxId: id, Filepath: abs, MaxTimeoutSeconds: int32(b.set.apiTimeout / time.Second)})
		return err
	})
	if err != nil {
		return nil, err
	}
	if !r.GetSuccess() {
		return nil, fmt.Errorf("aviato read %s in sandbox %s: %s: %w", abs, id, r.GetErrorMessage(), core.ErrNotFound)
	}
	if int64(len(r.GetFileContents())) > maxBytes {
		return nil, fmt.Errorf("aviato read %s in sandbox %s: %d bytes, cap %d: %w", abs, id, len(r.GetFileContents()), maxBytes, core.ErrTooLarge)
	}
	return r.GetFileContents(), nil
}

// WriteFile writes with AddFile; the mode, which AddFile cannot carry, is
// set afterwards when it is not the usual 0644.
func (b *Backend) WriteFile(ctx context.Context, id, p string, data []byte, mode uint32) error {
	if err := b.ready(); err != nil {
		return err
	}
	abs, err := b.resolveFile(p)
	if err != nil {
		return err
	}
	add := func() (*pb.AddFileSandboxResponse, error) {
		var r *pb.AddFileSandboxResponse
		err := b.call(ctx, "write "+abs+" in sandbox "+id, b.set.maxRetries, func(ctx context.Context) error {
			var err error
			r, err = b.rpc.AddFile(b.authed(ctx), &pb.AddFileSandboxRequest{SandboxId: id, Filepath: abs, FileContents: data, MaxTimeoutSeconds: int32(b.set.apiTimeout / time.Second)})
			return err
		})
		return r, err
	}
	r, err := add()
	if err == nil && !r.GetSuccess() {
		// Whether AddFile makes parent directories is not documented;
		// make them and try once more.
		if res, xerr := b.Exec(ctx, id, core.ExecRequest{Command: []string{"mkdir", "-p", "--", path.Dir(abs)}, Dir: "/", Timeout: b.set.apiTimeout}); xerr == nil && res.ExitCode == 0 {
			r, err = add()
		}
	}
	if err != nil {
		return err
	}
	if !r.GetSuccess() {
		return fmt.Errorf("aviato write %s in sandbox %s: %s", abs, id, r.GetErrorMessage())
	}
	if mode&0o7777 != 0 && mode&0o7777 != 0o644 {
		res, err := b.Exec(ctx, id, core.ExecRequest{Command: []string{"chmod", strconv.FormatUint(uint64(mode&0o7777), 8), "--", abs}, Dir: "/", Timeout: b.set.apiTimeout})
		if err == nil && res.ExitCode != 0 {
			err = errors.New(strings.TrimSpace(res.Stderr))
		}
		if err != nil {
			return fmt.Errorf("aviato chmod %s in sandbox %s: %w", abs, id, err)
		}
	}
	return nil
}

// ListFiles lists a directory with stat(1), as the API has no listing call.
// Names holding a newline cannot be listed this way and are skipped.
func (b *Backend) ListFiles(ctx context.Context, id, p string) ([]core.FileInfo, error) {
	abs, err := b.resolveFile(p)
	if err != nil {
		return nil, err
	}
	const script = `cd -- "$1" || exit 3
for f in * .*; do
  case "$f" in .|..) continue;; esac
  [ -e "$f" ] || [ -L "$f" ] || continue
  stat -c '%s|%f|%Y|%n' -- "$f"
done`
	res, err := b.Exec(ctx, id, core.ExecRequest{Command: []string{"/bin/sh", "-c", script, "ls", abs}, Dir: "/", Timeout: b.set.apiTimeout, MaxOutputBytes: 16 << 20})
	if err != nil {
		return nil, err
	}
	if res.ExitCode == 3 {
		return nil, fmt.Errorf("aviato list %s in sandbox %s: %s: %w", abs, id, strings.TrimSpace(res.Stderr), core.ErrNotFound)
	}
	if res.ExitCode != 0 {
		return nil, fmt.Errorf("aviato list %s in sandbox %s: exit %d: %s", abs, id, res.ExitCode, strings.TrimSpace(res.Stderr))
	}
	var out []core.FileInfo
	for _, line := range strings.Split(strings.TrimSuffix(res.Stdout, "\n"), "\n") {
		f := strings.SplitN(line, "|", 4)
		if len(f) != 4 {
			continue
		}
		size, e1 := strconv.ParseInt(f[0], 10, 64)
		raw, e2 := strconv.ParseUint(f[1], 16, 32)
		mt, e3 := strconv.ParseInt(f[2], 10, 64)
		if e1 != nil || e2 != nil || e3 != nil {
			continue
		}
		out = append(out, core.FileInfo{Path: path.Join(abs, f[3]), Size: size, Mode: uint32(raw) & 0o7777, IsDir: raw&0o170000 == 0o040000, ModTime: time.Unix(mt, 0).UTC()})
	}
	return out, nil
}

// Destroy deletes a sandbox.
func (b *Backend) Destroy(ctx context.Context, id string) error {
	if b.rpc == nil {
		return errors.New("aviato backend is not configured")
	}
	err := b.call(ctx, "delete sandbox "+id, b.set.maxRetries, func(ctx context.Context) error {
		r, err := b.rpc.Delete(b.authed(ctx), &pb.DeleteSandboxRequest{SandboxId: id})
		if err == nil && !r.GetSuccess() {
			return status.Error(codes.Internal, r.GetErrorMessage())
		}
		return err
	})
	if err == nil || errors.Is(err, core.ErrNotFound) {
		b.mu.Lock()
		delete(b.live, id)
		delete(b.output, id)
		b.mu.Unlock()
	}
	return err
}

// List returns the rlhost sandboxes whose tags include all of labels. The
// service does not return tags, so labels are known only for sandboxes this
// process made; others carry the labels asked for.
func (b *Backend) List(ctx context.Context, labels map[string]string) ([]core.SandboxInfo, error) {
	if err := b.ready(); err != nil {
		return nil, err
	}
	return b.list(ctx, append(tagsOf(labels), managedTag), labels)
}

func (b *Backend) list(ctx context.Context, tags []string, labels map[string]string) ([]core.SandboxInfo, error) {
	var r *pb.ListSandboxesResponse
	err := b.call(ctx, "list sandboxes", b.set.maxRetries, func(ctx context.Context) error {
		var err error
		r, err = b.rpc.List(b.authed(ctx), &pb.ListSandboxesRequest{Tags: tags})
		return err
	})
	if err != nil {
		return nil, err
	}
	var out []core.SandboxInfo
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range r.GetSandboxes() {
		info, ok := b.live[s.GetSandboxId()]
		if !ok {
			info = core.SandboxInfo{ID: s.GetSandboxId(), Backend: backendName, Labels: labels, Isolation: isolationCloud}
			if t := s.GetStartedAtTime(); t != nil {
				info.CreatedAt = t.AsTime()
			}
		}
		info.State = strings.ToLower(strings.TrimPrefix(s.GetSandboxStatus().String(), "SANDBOX_STATUS_"))
		out = append(out, info)
	}
	return out, nil
}

// ReapOrphans deletes the sandboxes of dead rlhost processes on this host
// that used the same service, found through their owner records.
func (b *Backend) ReapOrphans(ctx context.Context) ([]core.SandboxInfo, error) {
	if err := b.ready(); err != nil {
		return nil, err
	}
	var out []core.SandboxInfo
	err := sweepRecords(b.set.stateDir, b.owner.Host, b.set.baseURL, func(rec record) (*record, error) {
		found, err := b.list(ctx, []string{managedTag, ownerTag(rec.Owner)}, nil)
		if err != nil {
			return &rec, err
		}
		var errs []error
		for _, s := range found {
			if err := b.Destroy(ctx, s.ID); err != nil && !errors.Is(err, core.ErrNotFound) {
				errs = append(errs, err)
				continue
			}
			out = append(out, s)
		}
		if len(errs) > 0 {
			return &rec, errors.Join(errs...)
		}
		return nil, nil
	})
	return out, err
}

// Shutdown deletes every sandbox this process made, including any whose
// Start answer was lost (found by the owner tag), and removes the record.
func (b *Backend) Shutdown(ctx context.Context) error {
	b.mu.Lock()
	configured := b.rpc != nil
	b.mu.Unlock()
	if first, _ := b.gate.Close(ctx); !first || !configured {
		return nil
	}
	b.mu.Lock()
	ids := make([]string, 0, len(b.live))
	mine := map[string]bool{}
	for id := range b.live {
		ids = append(ids, id)
		mine[id] = true
	}
	b.mu.Unlock()
	var errs []error
	if found, err := b.list(ctx, []string{managedTag, ownerTag(b.owner)}, nil); err == nil {
		for _, s := range found {
			if !mine[s.ID] {
				ids = append(ids, s.ID)
			}
		}
	} else {
		errs = append(errs, err)
	}
	var wg sync.WaitGroup
	var emu sync.Mutex
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := b.Destroy(ctx, id); err != nil && !errors.Is(err, core.ErrNotFound) {
				emu.Lock()
				errs = append(errs, err)
				emu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) == 0 {
		_ = os.Remove(recordPath(b.set.stateDir, b.owner))
	}
	b.conn.Close()
	return errors.Join(errs...)
}
