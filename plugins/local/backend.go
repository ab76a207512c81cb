package local

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/labels"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/core/sdk/pluginbase"
	"github.com/rlhost/rlhost/core/sdk/sandboxplugin"
	"github.com/rlhost/rlhost/plugins/backendkit/pace"
	"github.com/rlhost/rlhost/plugins/backendkit/procowner"
	"github.com/rlhost/rlhost/plugins/local/sandboxinit"
)

var _ sandboxplugin.Backend = (*Backend)(nil)

// Backend is the local sandbox backend. Create it with New and call
// Configure before anything else.
type Backend struct {
	mu          sync.Mutex
	configured  bool
	closed      bool
	set         settings
	spec        core.SandboxSpec // the block's spec, what the pool is warmed with
	cg          *cgroupRoot
	state       *stateDir
	boxes       map[string]*sandbox
	live        *pace.Cap // sandboxes existing or being created, against max_sandboxes
	pool        *pool     // sandboxes kept for the next creates
	resets      sync.WaitGroup
	resetWarned bool
	pacer       *pace.Pacer // create_rate
	launcher    launcherSlot
	slots       slots // the next sandboxes' state entries and cgroups
}

// New returns an unconfigured local backend.
func New() *Backend {
	return &Backend{boxes: map[string]*sandbox{}}
}

// Info describes the backend and its config schema.
func (b *Backend) Info() pluginbase.Info {
	return pluginbase.Info{
		Name:        "local",
		Version:     "0.1.0",
		Kind:        pluginbase.KindSandbox,
		Description: "sandboxes on this machine: Linux namespaces + cgroups, or no isolation for trusted code",
		Config:      configSpec(),
	}
}

// Configure validates the config, detects what the kernel offers, reaps
// sandboxes of dead processes from the state dir and warms the pool.
func (b *Backend) Configure(ctx context.Context, cfg schema.Config, spec core.SandboxSpec) schema.Diagnostics {
	c := defaultConfig()
	if err := cfg.Decode(&c); err != nil {
		return schema.Diagnostics{schema.Errorf(nil, "invalid local backend config", "%v", err)}
	}
	set, diags := c.validate(cfg)
	if diags.HasErrors() {
		return diags
	}
	cg := &cgroupRoot{kind: cgroupOff}
	if set.Isolation == "namespaces" {
		if err := checkNamespaces(); err != nil {
			return append(diags, schema.Errorf([]string{"isolation"}, "namespaces unavailable", "%v", err))
		}
		var err error
		if cg, err = detectCgroups(set.Cgroup); err != nil {
			return append(diags, schema.Errorf([]string{"cgroup"}, "cgroups unavailable", "%v", err))
		}
	}
	diags = append(diags, set.checkSpec(spec, cg.kind)...)
	if diags.HasErrors() {
		return diags
	}
	st, err := openStateDir(set.stateDir)
	if err != nil {
		return append(diags, schema.Errorf([]string{"state_dir"}, "state dir unusable", "%v", err))
	}
	if set.Isolation == "namespaces" && set.Workspace == "host" && os.Geteuid() == 0 {
		if err := searchableByOthers(set.stateDir); err != nil {
			return append(diags, schema.Errorf([]string{"state_dir"}, "workspace = \"host\" needs a state_dir sandbox uids can reach", "%v", err))
		}
	}

	b.mu.Lock()
	if b.configured && (b.live.InUse() > 0 || b.closed) {
		b.mu.Unlock()
		return append(diags, schema.Errorf(nil, "already configured", "Configure may not run while sandboxes exist"))
	}
	b.set, b.spec, b.cg, b.state, b.configured = set, spec, cg, st, true
	b.live, b.pacer = pace.NewCap(set.MaxSandboxes), pace.NewPacer(set.CreateRate)
	old := b.pool
	b.pool = newPool(spec, b.live, func(ctx context.Context) (*sandbox, error) { return b.build(ctx, spec, false) },
		func(sb *sandbox) { b.destroyOwned(sb) })
	b.mu.Unlock()
	if old != nil {
		old.close() // empty: a backend with pooled sandboxes is not reconfigured
	}
	b.launcher.reset() // its template was built from the old settings

	if _, err := b.ReapOrphans(ctx); err != nil {
		diags = append(diags, schema.Diagnostic{Severity: schema.Warning, Summary: "reaping orphaned sandboxes failed", Detail: err.Error()})
	}
	if set.Isolation == "namespaces" {
		// Prove the whole path works now, not at the first episode.
		probe, err := b.create(ctx, spec, false)
		if err != nil {
			if strings.Contains(err.Error(), "seccomp: install filter") {
				return append(diags, schema.Errorf([]string{"seccomp"}, "this kernel refused the seccomp filter",
					"%v (it needs CONFIG_SECCOMP_FILTER); seccomp = \"off\" runs without it, and every result says so", err))
			}
			return append(diags, schema.Errorf([]string{"isolation"}, "cannot start a namespaced sandbox", "%v", err))
		}
		// With a pool the probe, which ran nothing, is its first sandbox:
		// destroying it and building another costs a create and a destroy
		// (a job's fixed CPU) for the same fresh sandbox.
		if set.PoolSize == 0 || !b.poolProbe(probe.ID) {
			// Without a pool the probe is not kept for a create that may
			// never come: recycling keeps only as many as were in use.
			b.pool.forgetPeak()
			if err := b.Destroy(ctx, probe.ID); err != nil {
				return append(diags, schema.Errorf([]string{"isolation"}, "cannot destroy a namespaced sandbox", "%v", err))
			}
		}
	}
	if set.PoolSize > 0 {
		b.pool.start(set.PoolSize, set.recycle)
	}
	return diags
}

// poolProbe moves Configure's probe sandbox, fresh and never lent, from
// the live sandboxes into the pool; false if it is not there.
func (b *Backend) poolProbe(id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	sb, ok := b.boxes[id]
	if !ok || b.closed || !sb.impl.alive() {
		return false
	}
	if sb.ttl != nil {
		// A pooled sandbox has no timer of its own; adopt starts one
		// when it is taken.
		sb.ttl.Stop()
		sb.ttl = nil
	}
	delete(b.boxes, id)
	b.pool.add(sb)
	return true
}

func (b *Backend) settings() (settings, *stateDir, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.configured {
		return settings{}, nil, fmt.Errorf("local backend: Configure was not called: %w", core.ErrUnavailable)
	}
	if b.closed {
		return settings{}, nil, fmt.Errorf("local backend: shut down: %w", core.ErrUnavailable)
	}
	return b.set, b.state, nil
}

// Create makes a sandbox, from the pool when the spec matches the block's.
func (b *Backend) Create(ctx context.Context, spec core.SandboxSpec) (core.SandboxInfo, error) {
	return b.create(ctx, spec, true)
}

// create makes a sandbox; prepareNext has a cold create prepare the next
// sandboxes' entries and cgroups (slots.go). Configure's probe does not:
// a backend that is configured and never used prepares nothing.
func (b *Backend) create(ctx context.Context, spec core.SandboxSpec, prepareNext bool) (core.SandboxInfo, error) {
	set, _, err := b.settings()
	if err != nil {
		return core.SandboxInfo{}, err
	}
	if d := set.checkSpec(spec, b.cg.kind); d.HasErrors() {
		return core.SandboxInfo{}, fmt.Errorf("local backend: create: %w", d.Err())
	}
	if sb := b.pool.take(spec); sb != nil {
		return b.adopt(sb, spec)
	}
	if err := b.waitRate(ctx); err != nil {
		return core.SandboxInfo{}, err
	}
	if err := b.pool.admit(); err != nil {
		if !b.pool.evict() {
			return core.SandboxInfo{}, err
		}
		if err := b.pool.admit(); err != nil {
			return core.SandboxInfo{}, err
		}
	}
	// The pool's builds are off anyone's path already.
	sb, err := b.build(ctx, spec, prepareNext)
	if err != nil {
		b.live.Put()
		return core.SandboxInfo{}, err
	}
	return b.adopt(sb, spec)
}

func (b *Backend) waitRate(ctx context.Context) error {
	if err := b.pacer.Wait(ctx); err != nil {
		return fmt.Errorf("local backend: waiting for create_rate: %w", err)
	}
	return nil
}

// build creates and registers a sandbox; the caller has admitted it.
//
// With prepareNext it also prepares the next sandboxes' entries and
// cgroups (refillSlots), starting as soon as this one's init exists: the
// work then overlaps the init's start-up, which waits mostly on the init's
// own CPU, instead of this sandbox's first command, which the caller waits
// for next.
func (b *Backend) build(ctx context.Context, spec core.SandboxSpec, prepareNext bool) (*sandbox, error) {
	set, st, err := b.settings()
	if err != nil {
		return nil, err
	}
	// Slots exist only where refillSlots made them: namespaces, cgroups.
	sl := b.slots.take(shapeOf(spec.Limits))
	var id string
	var e *entry
	var cg *sandboxCgroup
	if sl != nil {
		id, e, cg = sl.id, sl.entry, sl.cg
	} else {
		id = newID()
		if e, err = st.reserve(id); err != nil {
			return nil, err
		}
	}
	tr := sandboxinit.NewTracer("build " + id)
	defer tr.Done()
	tr.Mark("reserve")
	m := meta{ID: id, Labels: maps.Clone(spec.Labels), CreatedAt: time.Now().UTC(), Isolation: set.isolationName(), OwnerPID: os.Getpid()}
	if spec.TTL > 0 {
		m.Expires = m.CreatedAt.Add(spec.TTL)
	}
	sb := &sandbox{meta: m, spec: spec, entry: e}
	switch set.Isolation {
	case "none":
		if sb.impl, err = newNoneBox(e); err == nil {
			err = writeMeta(e.dir, sb.meta)
		}
	default:
		var nb *nsBox
		nb, err = startNSBox(ctx, &set, b.cg, cg, b.launcher.get(ctx, &set), spec, id, e.dir, func(nb *nsBox) error {
			// Written as soon as the init exists: a crash while it
			// starts up leaves a record the next run can reap it by.
			sb.meta.InitPID, sb.meta.InitStart, sb.meta.Cgroup, sb.meta.HostUID = nb.pid, procowner.ProcessStart(nb.pid), nb.cg, nb.uid
			if prepareNext {
				defer b.refillSlots()
			}
			return writeMeta(e.dir, sb.meta)
		})
		if err == nil {
			sb.impl = nb
		}
	}
	tr.Mark("start")
	if err == nil {
		err = st.publish(e, sb.meta.ID)
	}
	tr.Mark("publish")
	if err != nil {
		if sb.impl != nil {
			sb.impl.stop()
		}
		e.release()
		return nil, fmt.Errorf("local backend: create sandbox: %w", err)
	}
	return sb, nil
}

// refillSlots prepares the next sandboxes' entries and cgroups, in the
// block's limits, in the background (see slots.go).
func (b *Backend) refillSlots() {
	set, st, err := b.settings()
	if err != nil || set.Isolation == "none" || b.cg.kind == cgroupOff {
		return
	}
	shape := shapeOf(b.spec.Limits)
	b.slots.refill(func() (*slot, error) {
		id := newID()
		e, err := st.reserve(id)
		if err != nil {
			return nil, err
		}
		cg, err := shape.create(b.cg, id)
		if err != nil {
			e.release()
			return nil, err
		}
		return &slot{id: id, entry: e, cg: cg, shape: shape}, nil
	})
}

// Preparing reports whether the backend is preparing the next sandboxes'
// state entries and cgroups in the background; benchmarks wait for it to
// end so that work does not land on a baseline's timing.
func (b *Backend) Preparing() bool { return b.slots.busy() }

// adopt gives a built sandbox its labels and TTL and makes it visible.
func (b *Backend) adopt(sb *sandbox, spec core.SandboxSpec) (core.SandboxInfo, error) {
	if !maps.Equal(sb.meta.Labels, spec.Labels) || spec.TTL > 0 {
		sb.meta.Labels = maps.Clone(spec.Labels)
		if spec.TTL > 0 {
			sb.meta.Expires = time.Now().UTC().Add(spec.TTL)
		}
		if err := writeMeta(sb.entry.dir, sb.meta); err != nil {
			b.destroyOwned(sb)
			return core.SandboxInfo{}, err
		}
	}
	sb.spec = spec
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		b.destroyOwned(sb)
		return core.SandboxInfo{}, fmt.Errorf("local backend: shut down: %w", core.ErrUnavailable)
	}
	b.boxes[sb.meta.ID] = sb
	b.mu.Unlock()
	if spec.TTL > 0 {
		id := sb.meta.ID
		sb.ttl = time.AfterFunc(spec.TTL, func() { b.Destroy(context.Background(), id) })
	}
	return sb.meta.info("running"), nil
}

func (b *Backend) get(id string) (*sandbox, error) {
	b.mu.Lock()
	sb, ok := b.boxes[id]
	b.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("local backend: sandbox %q: %w", id, core.ErrNotFound)
	}
	return sb, nil
}

// Exec runs a command in the sandbox with the sandbox's environment and limits.
func (b *Backend) Exec(ctx context.Context, id string, req core.ExecRequest) (core.ExecResult, error) {
	sb, err := b.get(id)
	if err != nil {
		return core.ExecResult{}, err
	}
	ctx, done, err := sb.enter(ctx)
	if err != nil {
		return core.ExecResult{}, err
	}
	defer done()
	b.mu.Lock()
	set := b.set
	b.mu.Unlock()
	s := execSpecFor(&set, sb.spec, req, b.cg.kind)
	res, err := sb.impl.exec(ctx, s)
	if err != nil && !sb.impl.alive() {
		return res, fmt.Errorf("local backend: sandbox %s died: %w", id, err)
	}
	return res, err
}

// execSpecFor merges the sandbox's defaults with one request. The command
// sees only the spec's and the request's variables, plus PATH and HOME
// defaults: nothing from the host environment.
func execSpecFor(set *settings, spec core.SandboxSpec, req core.ExecRequest, cg cgroupKind) sandboxinit.ExecSpec {
	env := map[string]string{"PATH": sandboxinit.DefaultPath, "HOME": core.DefaultWorkdir}
	maps.Copy(env, spec.Env)
	maps.Copy(env, req.Env)
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s := sandboxinit.ExecSpec{Argv: req.Command, Stdin: req.Stdin, Dir: req.Dir, Timeout: req.TimeoutOrDefault(), MaxOutput: req.MaxOutputBytes}
	for _, k := range keys {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(env[k], 0) {
			continue
		}
		s.Env = append(s.Env, k+"="+env[k])
	}
	if s.Dir == "" {
		s.Dir = spec.Workdir
	}
	if s.Dir == "" {
		s.Dir = core.DefaultWorkdir
	} else if !strings.HasPrefix(s.Dir, "/") {
		s.Dir = core.DefaultWorkdir + "/" + s.Dir
	}
	if s.MaxOutput <= 0 {
		s.MaxOutput = spec.Limits.OutputBytes
	}
	if s.MaxOutput <= 0 {
		s.MaxOutput = defaultOutputBytes
	}
	s.MaxOutput = min(s.MaxOutput, maxOutputBytes)
	s.CPUTime = spec.Limits.CPUTime
	s.FileSize = orDefault(spec.Limits.FileSizeBytes, defaultFileSize)
	s.OpenFiles = int(orDefault(int64(spec.Limits.OpenFiles), defaultOpenFiles))
	if set.Isolation == "namespaces" && cg == cgroupOff {
		s.AddressSpace = orDefault(spec.Limits.MemoryBytes, defaultMemory)
		s.Nproc = int(orDefault(int64(spec.Limits.Pids), defaultPids))
	}
	return s
}

func (b *Backend) fileCap(sb *sandbox) int64 {
	return orDefault(sb.spec.Limits.FileSizeBytes, defaultReadMax)
}

// ReadFile reads a file of the sandbox, confined to its workspace.
func (b *Backend) ReadFile(ctx context.Context, id, path string, maxBytes int64) ([]byte, error) {
	sb, err := b.get(id)
	if err != nil {
		return nil, err
	}
	ctx, done, err := sb.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	limit := b.fileCap(sb)
	if maxBytes <= 0 || maxBytes > limit {
		maxBytes = limit
	}
	return sb.impl.readFile(ctx, path, maxBytes)
}

// WriteFile writes a file of the sandbox, confined to its workspace.
func (b *Backend) WriteFile(ctx context.Context, id, path string, data []byte, mode uint32) error {
	sb, err := b.get(id)
	if err != nil {
		return err
	}
	ctx, done, err := sb.enter(ctx)
	if err != nil {
		return err
	}
	defer done()
	// Checked here too, so an oversized write never reaches (and never
	// costs memory in) the sandbox.
	if limit := b.fileCap(sb); int64(len(data)) > limit {
		return fmt.Errorf("write %s: %d bytes > cap %d: %w", path, len(data), limit, core.ErrTooLarge)
	}
	return sb.impl.writeFile(ctx, path, data, mode, b.fileCap(sb))
}

// ListFiles lists a directory of the sandbox's workspace.
func (b *Backend) ListFiles(ctx context.Context, id, path string) ([]core.FileInfo, error) {
	sb, err := b.get(id)
	if err != nil {
		return nil, err
	}
	ctx, done, err := sb.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	return sb.impl.list(ctx, path)
}

// Destroy removes a sandbox, whichever process owns it.
func (b *Backend) Destroy(ctx context.Context, id string) error {
	b.mu.Lock()
	sb, ok := b.boxes[id]
	b.mu.Unlock()
	if ok {
		return b.destroyOwned(sb)
	}
	_, st, err := b.settings()
	if err != nil {
		return err
	}
	recs, err := st.scan()
	if err != nil {
		return err
	}
	for _, r := range recs {
		if r.meta.ID == id {
			return destroyRecord(r)
		}
	}
	return fmt.Errorf("local backend: destroy %q: %w", id, core.ErrNotFound)
}

func (b *Backend) destroyOwned(sb *sandbox) error {
	sb.once.Do(func() {
		if sb.ttl != nil {
			sb.ttl.Stop()
		}
		sb.close()
		if done, err := b.recycle(sb); done {
			sb.err = err
			return
		}
		err := sb.impl.stop()
		if rerr := sb.entry.release(); rerr != nil {
			err = errors.Join(err, rerr)
		}
		b.mu.Lock()
		if b.boxes[sb.meta.ID] == sb {
			delete(b.boxes, sb.meta.ID)
		}
		b.mu.Unlock()
		b.pool.free()
		if err != nil {
			sb.err = fmt.Errorf("local backend: destroy %s: %w", sb.meta.ID, err)
		}
	})
	return sb.err
}

// recycle is Destroy under the recycle setting, called by destroyOwned
// (which makes it the only teardown of sb): the sandbox is reset (renew)
// and goes back to the pool for the next Create of the block's spec. It
// reports false, having done nothing, when the sandbox does not qualify
// (another spec, a dead init, a full pool), and the caller destroys it. A
// reset that fails destroys it here.
func (b *Backend) recycle(sb *sandbox) (bool, error) {
	set, st, err := b.settings()
	if err != nil || !set.recycle || !recyclable(sb, b.spec) {
		return false, nil
	}
	b.mu.Lock()
	if b.closed || b.boxes[sb.meta.ID] != sb || !b.pool.reserve() {
		b.mu.Unlock()
		return false, nil
	}
	delete(b.boxes, sb.meta.ID)
	b.resets.Add(1)
	b.mu.Unlock()
	defer b.resets.Done()

	next, err := renew(st, sb, b.spec)
	keep := b.pool.putBack(next, err == nil)
	if err != nil {
		b.warnResetFailed(sb.meta.ID, err)
	}
	if !keep {
		// A sandbox that could not be reset is destroyed instead, which is
		// all Destroy promised: only that can fail it.
		err = errors.Join(next.impl.stop(), next.entry.release())
		b.pool.free()
	}
	if err != nil {
		return true, fmt.Errorf("local backend: destroy %s: %w", sb.meta.ID, err)
	}
	return true, nil
}

// warnResetFailed says, once per backend, that a reset failed: each such
// sandbox is destroyed and the next one created, so recycling silently
// stopped working would cost a create per episode.
func (b *Backend) warnResetFailed(id string, err error) {
	b.mu.Lock()
	first := !b.resetWarned
	b.resetWarned = true
	b.mu.Unlock()
	if first {
		fmt.Fprintf(os.Stderr, "rlhost local backend: %s: %v; destroyed instead of reused (said once)\n", id, err)
	}
}

// List returns the sandboxes in the state dir (any process's) whose labels
// include all of labels. State is "running" while the owner lives, else
// "orphaned".
func (b *Backend) List(ctx context.Context, want map[string]string) ([]core.SandboxInfo, error) {
	_, st, err := b.settings()
	if err != nil {
		return nil, err
	}
	recs, err := st.scan()
	if err != nil {
		return nil, err
	}
	pooled := b.pool.ids()
	var out []core.SandboxInfo
	for _, r := range recs {
		if pooled[r.meta.ID] || r.meta.CreatedAt.IsZero() || !labels.Match(r.meta.Labels, want) {
			continue
		}
		state := "running"
		if !r.owned {
			state = "orphaned"
		}
		out = append(out, r.meta.info(state))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

// ReapOrphans destroys sandboxes whose owner is gone or whose TTL passed.
func (b *Backend) ReapOrphans(ctx context.Context) ([]core.SandboxInfo, error) {
	_, st, err := b.settings()
	if err != nil {
		return nil, err
	}
	recs, err := st.scan()
	if err != nil {
		return nil, err
	}
	var out []core.SandboxInfo
	var errs []error
	now := time.Now()
	for _, r := range recs {
		expired := !r.meta.Expires.IsZero() && now.After(r.meta.Expires)
		if r.owned && !expired {
			continue
		}
		if expired && r.owned {
			if err := b.Destroy(ctx, r.meta.ID); err != nil && !errors.Is(err, core.ErrNotFound) {
				errs = append(errs, err)
				continue
			}
		} else {
			if r.meta.Cgroup == nil && b.cg != nil {
				r.meta.Cgroup = b.cg.guess(r.meta.ID) // crashed before writing meta
			}
			if err := destroyRecord(r); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		out = append(out, r.meta.info("orphaned"))
	}
	return out, errors.Join(errs...)
}

// Shutdown destroys every sandbox of this process, pooled ones included.
func (b *Backend) Shutdown(ctx context.Context) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	p := b.pool
	b.mu.Unlock()
	if p != nil {
		p.close()
	}
	// Resets in flight end destroyed (the pool is closed) before this
	// returns.
	b.resets.Wait()
	b.mu.Lock()
	all := make([]*sandbox, 0, len(b.boxes))
	for _, sb := range b.boxes {
		all = append(all, sb)
	}
	b.mu.Unlock()
	if p != nil {
		all = append(all, p.drain()...)
	}
	// A teardown mostly waits (for the init to die, for its cgroups to
	// empty), so several run at once: a Ctrl-C with dozens of idle reused
	// sandboxes would otherwise wait for each in turn.
	var (
		errs  []error
		errMu sync.Mutex
		wg    sync.WaitGroup
		limit = make(chan struct{}, shutdownParallel)
	)
	for _, sb := range all {
		wg.Add(1)
		limit <- struct{}{}
		go func() {
			defer func() { <-limit; wg.Done() }()
			if err := b.destroyOwned(sb); err != nil {
				errMu.Lock()
				errs = append(errs, err)
				errMu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := b.slots.close(); err != nil {
		errs = append(errs, err)
	}
	b.launcher.close()
	return errors.Join(errs...)
}

// shutdownParallel is how many sandboxes Shutdown tears down at once.
const shutdownParallel = 8

// PoolLen reports how many warm sandboxes are waiting (for benchmarks and
// status output).
func (b *Backend) PoolLen() int {
	b.mu.Lock()
	p := b.pool
	b.mu.Unlock()
	if p == nil {
		return 0
	}
	return p.len()
}
