package daytona

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	apiclient "github.com/daytonaio/daytona/libs/api-client-go"
	sdk "github.com/daytonaio/daytona/libs/sdk-go/pkg/daytona"
	sdkerrors "github.com/daytonaio/daytona/libs/sdk-go/pkg/errors"
	"github.com/daytonaio/daytona/libs/sdk-go/pkg/options"
	"github.com/daytonaio/daytona/libs/sdk-go/pkg/types"
	toolbox "github.com/daytonaio/daytona/libs/toolbox-api-client-go"
	"github.com/hashicorp/go-hclog"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/retry"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/core/sdk/pluginbase"
	"github.com/rlhost/rlhost/core/sdk/sandboxplugin"
	"github.com/rlhost/rlhost/plugins/backendkit/inflight"
	"github.com/rlhost/rlhost/plugins/backendkit/pace"
	"github.com/rlhost/rlhost/plugins/backendkit/procowner"
	"github.com/rlhost/rlhost/plugins/backendkit/statedir"
)

var _ sandboxplugin.Backend = (*Backend)(nil)

// Backend manages Daytona sandboxes for one `sandbox` block.
type Backend struct {
	owner procowner.Owner
	host  string

	mu         sync.Mutex
	s          settings
	client     *sdk.Client
	api        *apiclient.APIClient // generated client, for calls whose SDK wrapper drops labels
	http       *http.Client         // toolbox calls: no client-wide timeout, deadlines come per call
	state      *stateFile
	live       *pace.Cap   // max_sandboxes, taken when a create starts
	starting   *pace.Cap   // max_starting
	pacer      *pace.Pacer // create_rate
	byName     map[string]*tracked
	byID       map[string]*tracked
	foreign    map[string]*sdk.Sandbox // handles of sandboxes other processes made
	gate       *inflight.Gate          // calls in progress, for Shutdown
	configured bool
	// log announces retries; hclog JSON on stderr, which the host relays.
	log hclog.Logger
}

// tracked is a sandbox this process created (or is creating).
type tracked struct {
	name, id string
	workdir  string
	output   int64        // limits.output of the sandbox's spec: the exec default cap
	sb       *sdk.Sandbox // with rlhost's toolbox client; nil until started
	created  time.Time
	labels   map[string]string
	slot     bool // holds a max_sandboxes slot; guarded by Backend.mu
}

// New returns an unconfigured backend.
func New() *Backend {
	o := procowner.Current()
	return &Backend{
		owner: o, host: o.Host,
		byName: map[string]*tracked{}, byID: map[string]*tracked{}, foreign: map[string]*sdk.Sandbox{},
		gate: inflight.New(),
		http: &http.Client{Transport: transport()},
		log:  pluginbase.NewLogger(backendName),
	}
}

// transport is the default one with room for a batch of parallel calls to
// the same API and toolbox hosts.
func transport() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	return t
}

// Info describes the backend and its config schema.
func (b *Backend) Info() pluginbase.Info {
	return pluginbase.Info{
		Name: backendName, Version: backendVersion, Kind: pluginbase.KindSandbox,
		Description: "sandboxes in Daytona's cloud, through the Daytona Go SDK",
		Config:      configSpec(),
	}
}

// Configure validates the block, connects, and sweeps sandboxes of dead
// runs on this host. A rejected API key is an error on api_key.
func (b *Backend) Configure(ctx context.Context, cfg schema.Config, spec core.SandboxSpec) schema.Diagnostics {
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return schema.Diagnostics{schema.Errorf(nil, "invalid daytona settings", "%v", err)}
	}
	s, diags := validate(c, spec, cfg.RunID, os.Getenv)
	if diags.HasErrors() {
		return diags
	}
	client, err := sdk.NewClientWithConfig(&types.DaytonaConfig{APIKey: s.apiKey, APIUrl: s.apiURL, Target: s.target})
	if err != nil {
		return append(diags, schema.Errorf([]string{"api_key"}, "cannot create the Daytona client", "%v", err))
	}
	dir := s.stateDir
	if dir == "" {
		dir = statedir.PerUser(backendName)
	}
	st, err := openState(dir, b.owner, s.apiURL, s.runID)
	if err != nil {
		return append(diags, schema.Errorf([]string{"state_dir"}, "unusable state directory", "%v", err))
	}

	apiCfg := apiclient.NewConfiguration()
	apiCfg.Servers = apiclient.ServerConfigurations{{URL: strings.TrimRight(s.apiURL, "/")}}
	apiCfg.HTTPClient = b.http
	apiCfg.UserAgent = "rlhost-daytona/" + backendVersion
	apiCfg.AddDefaultHeader("X-Daytona-Source", "rlhost")

	b.mu.Lock()
	if b.configured || b.gate.Closed() {
		b.mu.Unlock()
		return append(diags, schema.Errorf(nil, "daytona backend already configured", "Configure is called once per plugin process"))
	}
	b.configured = true
	b.s, b.client, b.api, b.state = s, client, apiclient.NewAPIClient(apiCfg), st
	b.live, b.starting = pace.NewCap(s.maxSandboxes), pace.NewCap(s.maxStarting)
	b.pacer = pace.NewPacer(s.createRate)
	b.mu.Unlock()

	// The sweep doubles as the credentials check: it lists sandboxes.
	removed, err := b.ReapOrphans(ctx)
	switch {
	case errors.Is(err, ErrAuth):
		diags = append(diags, schema.Errorf([]string{"api_key"}, "Daytona rejected the API key",
			"%s answered %v; check $%s or api_key (the key is never printed)", s.apiURL, statusText(err), apiKeyEnv))
	case err != nil:
		w := schema.Errorf(nil, "orphan sweep incomplete", "%v", err)
		w.Severity = schema.Warning
		diags = append(diags, w)
	}
	if len(removed) > 0 {
		ids := make([]string, len(removed))
		for i, r := range removed {
			ids[i] = r.ID
		}
		w := schema.Errorf(nil, "removed sandboxes of dead rlhost runs", "%d sandbox(es): %s", len(removed), strings.Join(ids, ", "))
		w.Severity = schema.Warning
		diags = append(diags, w)
	}
	return diags
}

func statusText(err error) string {
	st, _ := apiStatus(err)
	if st == 0 {
		return "without a status"
	}
	return fmt.Sprintf("HTTP %d", st)
}

// ready returns the settings, or an error before Configure or after Shutdown.
func (b *Backend) ready() (settings, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.gate.Closed():
		return settings{}, fmt.Errorf("daytona backend: %w", inflight.ErrClosed)
	case !b.configured:
		return settings{}, errors.New("daytona backend: not configured")
	}
	return b.s, nil
}

func (b *Backend) opts(s settings) callOpts {
	return callOpts{timeout: s.apiTimeout, retries: s.maxRetries, log: b.log, api: s.apiURL}
}

// apiError converts an error of the generated API client as the SDK does,
// except that a failure without an HTTP answer keeps its transport error
// (which retry.Unreachable can read) instead of flattening it to text.
func apiError(err error, resp *http.Response) error {
	if resp == nil {
		return err
	}
	return sdkerrors.ConvertAPIError(err, resp)
}

// bind derives a context that also ends when Shutdown starts, and counts
// the call as in flight so Shutdown can wait for it.
func (b *Backend) bind(ctx context.Context) (context.Context, func(), error) {
	ctx, done, err := b.gate.Enter(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("daytona backend: %w", err)
	}
	return ctx, done, nil
}

func randomName() string {
	var x [6]byte
	rand.Read(x[:])
	return "rlhost-" + hex.EncodeToString(x[:])
}

// Create makes a sandbox and returns once it runs commands. Its name is
// recorded in the state file before the API call and its id right after,
// so a crash at any point leaves a record for the next start's sweep.
func (b *Backend) Create(ctx context.Context, spec core.SandboxSpec) (core.SandboxInfo, error) {
	base, err := b.ready()
	if err != nil {
		return core.SandboxInfo{}, err
	}
	s, diags := base.withSpec(spec, nil)
	if diags.HasErrors() {
		return core.SandboxInfo{}, fmt.Errorf("daytona create: %w", diags.Err())
	}
	ctx, done, err := b.bind(ctx)
	if err != nil {
		return core.SandboxInfo{}, err
	}
	defer done()

	if err := b.live.Take(ctx); err != nil {
		return core.SandboxInfo{}, fmt.Errorf("daytona create: waiting for a max_sandboxes slot: %w", err)
	}
	info, err := b.create(ctx, s)
	if err != nil {
		b.live.Put()
	}
	return info, err
}

func (b *Backend) create(ctx context.Context, s settings) (core.SandboxInfo, error) {
	if err := b.starting.Take(ctx); err != nil {
		return core.SandboxInfo{}, fmt.Errorf("daytona create: waiting for a max_starting slot: %w", err)
	}
	defer b.starting.Put()
	if err := b.pacer.Wait(ctx); err != nil {
		return core.SandboxInfo{}, fmt.Errorf("daytona create: waiting for create_rate: %w", err)
	}

	labels := map[string]string{}
	for k, v := range s.labels {
		labels[k] = v
	}
	labels[managedLabel] = "true"
	if s.runID != "" && labels[runLabel] == "" {
		// The host labels its sandboxes with the run; this covers callers
		// that bypass it, so `rlhost sandbox rm --run` still finds them.
		labels[runLabel] = s.runID
	}
	for k, v := range b.owner.Labels() {
		labels[k] = v
	}
	name := randomName()
	autoStop, autoDelete := s.autoStop, s.autoDelete
	bp := types.SandboxBaseParams{
		Name: name, EnvVars: s.env, Labels: labels,
		AutoStopInterval: &autoStop, AutoDeleteInterval: &autoDelete,
		NetworkBlockAll: s.blockAll, Ephemeral: s.ephemeral,
	}
	if s.allowList != "" {
		al := s.allowList
		bp.NetworkAllowList = &al
	}
	var params any
	if s.snapshot != "" {
		params = types.SnapshotParams{SandboxBaseParams: bp, Snapshot: s.snapshot}
	} else {
		ip := types.ImageParams{SandboxBaseParams: bp}
		if s.image != "" {
			ip.Image = s.image
		}
		if s.cpus > 0 || s.memGiB > 0 || s.diskGiB > 0 {
			ip.Resources = &types.Resources{CPU: s.cpus, Memory: s.memGiB, Disk: s.diskGiB}
		}
		if s.image == "" && ip.Resources == nil {
			params = types.SnapshotParams{SandboxBaseParams: bp} // the account's default snapshot
		} else {
			params = ip
		}
	}

	t := &tracked{name: name, workdir: s.workdir, output: s.outputBytes, created: time.Now().UTC(), labels: labels}
	b.mu.Lock()
	b.byName[name] = t
	b.mu.Unlock()
	if err := b.state.put(name, ""); err != nil {
		b.untrack(t)
		return core.SandboxInfo{}, fmt.Errorf("daytona create: %w", err)
	}

	var sb *sdk.Sandbox
	o := b.opts(s)
	o.beforeRetry = func(ctx context.Context, prev error) (bool, error) {
		// A 5xx or a lost response may hide a sandbox that was created:
		// adopt it by name rather than create a second one.
		if st, _ := apiStatus(prev); st == http.StatusTooManyRequests {
			return false, nil
		}
		actx, cancel := context.WithTimeout(ctx, s.apiTimeout)
		defer cancel()
		if got, err := b.client.Get(actx, name); err == nil {
			sb = got
			return true, nil
		}
		return false, nil
	}
	err := withRetry(ctx, "create sandbox", o, func(ctx context.Context) error {
		got, err := b.client.Create(ctx, params, options.WithWaitForStart(false), options.WithTimeout(s.apiTimeout))
		if err == nil {
			sb = got
		}
		return err
	})
	if err != nil {
		b.abandon(t, err)
		return core.SandboxInfo{}, err
	}
	b.mu.Lock()
	t.id = sb.ID
	b.byID[sb.ID] = t
	b.mu.Unlock()
	if err := b.state.put(name, sb.ID); err != nil {
		b.discard(t)
		return core.SandboxInfo{}, fmt.Errorf("daytona create: %w", err)
	}

	if err := b.waitStarted(ctx, s, sb); err != nil {
		b.discard(t)
		return core.SandboxInfo{}, err
	}
	h := b.rewrap(sb)
	err = withRetry(ctx, "create workdir", o, func(ctx context.Context) error {
		return h.FileSystem.CreateFolder(ctx, s.workdir, options.WithMode("0755"))
	})
	if err != nil {
		b.discard(t)
		return core.SandboxInfo{}, fmt.Errorf("%w (is workdir %s writable by the sandbox user?)", err, s.workdir)
	}
	b.mu.Lock()
	t.sb, t.slot = h, true
	b.mu.Unlock()
	return core.SandboxInfo{
		ID: sb.ID, Backend: backendName, Labels: labels, State: string(apiclient.SANDBOXSTATE_STARTED),
		CreatedAt: t.created, Isolation: isolationCloud,
	}, nil
}

// abandon cleans up after a failed create call. A 4xx (quota, bad image)
// or 429 means nothing was made; anything else may have made a sandbox with
// our name, so it is deleted by name, and kept on record if that fails.
func (b *Backend) abandon(t *tracked, cause error) {
	if st, _ := apiStatus(cause); st >= 400 && st < 500 && st != http.StatusRequestTimeout {
		b.untrack(t)
		return
	}
	b.discard(t)
}

// discard deletes a sandbox whose create failed half-way, with its own
// short context so a cancelled caller still cleans up.
func (b *Backend) discard(t *tracked) {
	b.mu.Lock()
	s := b.s
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), s.apiTimeout*time.Duration(s.maxRetries+1))
	defer cancel()
	b.remove(ctx, t) // on failure the record stays; Shutdown and the next sweep retry
}

// untrack forgets t and reports whether it was still tracked, so that
// concurrent Destroys of one sandbox free its max_sandboxes slot once.
func (b *Backend) untrack(t *tracked) bool {
	b.mu.Lock()
	_, had := b.byName[t.name]
	delete(b.byName, t.name)
	if t.id != "" {
		delete(b.byID, t.id)
	}
	b.mu.Unlock()
	b.state.remove(t.name)
	return had
}

// waitStarted polls until the sandbox is STARTED. It uses the SDK's
// RefreshData but its own pacing: the SDK's WaitForStart polls every 100 ms
// and gives up on the first 429, which a batch of creates would provoke.
func (b *Backend) waitStarted(ctx context.Context, s settings, sb *sdk.Sandbox) error {
	ctx, cancel := context.WithTimeout(ctx, s.startTimeout)
	defer cancel()
	interval := 100 * time.Millisecond
	for {
		switch sb.State {
		case apiclient.SANDBOXSTATE_STARTED:
			return nil
		case apiclient.SANDBOXSTATE_ERROR, apiclient.SANDBOXSTATE_BUILD_FAILED, apiclient.SANDBOXSTATE_DESTROYED, apiclient.SANDBOXSTATE_DESTROYING:
			return fmt.Errorf("daytona sandbox %s failed to start: state %s", sb.ID, sb.State)
		}
		if err := retry.Sleep(ctx, interval); err != nil {
			return fmt.Errorf("daytona sandbox %s not started after %s (state %s): %w", sb.ID, s.startTimeout, sb.State, err)
		}
		interval = min(interval*3/2, 2*time.Second)
		if err := withRetry(ctx, "poll sandbox "+sb.ID, b.opts(s), sb.RefreshData); err != nil {
			return err
		}
	}
}

// rewrap gives an SDK sandbox a toolbox client of rlhost's own: same URL
// and headers, but an HTTP client without the SDK's fixed 60 s timeout,
// which would cut off longer execs; deadlines come from each call instead.
func (b *Backend) rewrap(sb *sdk.Sandbox) *sdk.Sandbox {
	src := sb.ToolboxClient.GetConfig()
	cfg := toolbox.NewConfiguration()
	cfg.Host, cfg.Scheme, cfg.UserAgent = src.Host, src.Scheme, src.UserAgent
	cfg.Servers = append(toolbox.ServerConfigurations(nil), src.Servers...)
	for k, v := range src.DefaultHeader {
		cfg.AddDefaultHeader(k, v)
	}
	cfg.HTTPClient = b.http
	return sdk.NewSandbox(b.client, toolbox.NewAPIClient(cfg), sb.ID, sb.Name, sb.State, sb.Target,
		sb.AutoArchiveInterval, sb.AutoDeleteInterval, sb.NetworkBlockAll, sb.NetworkAllowList, types.CodeLanguagePython)
}

// handle finds the toolbox handle and workspace of a sandbox, asking the
// API for sandboxes other processes created.
func (b *Backend) handle(ctx context.Context, s settings, id string) (*sdk.Sandbox, string, error) {
	b.mu.Lock()
	if t := b.byID[id]; t != nil && t.sb != nil {
		b.mu.Unlock()
		return t.sb, t.workdir, nil
	}
	if sb := b.foreign[id]; sb != nil {
		b.mu.Unlock()
		return sb, s.workdir, nil
	}
	b.mu.Unlock()
	var sb *sdk.Sandbox
	err := withRetry(ctx, "get sandbox "+id, b.opts(s), func(ctx context.Context) error {
		got, err := b.client.Get(ctx, id)
		sb = got
		return err
	})
	if err != nil {
		return nil, "", err
	}
	if sb.State != apiclient.SANDBOXSTATE_STARTED {
		return nil, "", fmt.Errorf("daytona sandbox %s is %s, not started: %w", id, sb.State, core.ErrUnavailable)
	}
	h := b.rewrap(sb)
	b.mu.Lock()
	b.foreign[id] = h
	b.mu.Unlock()
	return h, s.workdir, nil
}

// outputCap is the default per-stream output cap of execs in sandbox id:
// its own spec's limits.output when this process made it, else the
// block's.
func (b *Backend) outputCap(id string, block int64) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t := b.byID[id]; t != nil && t.output > 0 {
		return t.output
	}
	return block
}

// bare is an SDK handle for control-plane calls on a sandbox by id or name,
// without a GET first.
func (b *Backend) bare(idOrName string) *sdk.Sandbox {
	return sdk.NewSandbox(b.client, nil, idOrName, idOrName, "", "", 0, 0, false, nil, types.CodeLanguagePython)
}

// ErrStoppedInstead means a delete failed and the sandbox was stopped, so
// Daytona's auto-delete (auto_delete_interval) removes it later.
var ErrStoppedInstead = errors.New("delete failed; sandbox stopped instead")

// remove deletes a tracked sandbox; if deleting fails it stops it and
// reports that. The record is dropped only once the sandbox is gone.
func (b *Backend) remove(ctx context.Context, t *tracked) (removed bool, err error) {
	key := t.id
	if key == "" {
		key = t.name
	}
	if err := b.deleteOrStop(ctx, key); err != nil {
		return false, err
	}
	return b.untrack(t), nil
}

func (b *Backend) deleteOrStop(ctx context.Context, idOrName string) error {
	_, err := b.deleteOrStopFound(ctx, idOrName)
	return err
}

// deleteOrStopFound is deleteOrStop that also says whether there was a
// sandbox to delete (false: it was already gone).
func (b *Backend) deleteOrStopFound(ctx context.Context, idOrName string) (bool, error) {
	b.mu.Lock()
	s := b.s
	b.mu.Unlock()
	del := withRetry(ctx, "delete sandbox "+idOrName, b.opts(s), func(ctx context.Context) error {
		return b.bare(idOrName).DeleteWithTimeout(ctx, 0)
	})
	if del == nil {
		return true, nil
	}
	if errors.Is(del, core.ErrNotFound) {
		return false, nil
	}
	if ctx.Err() != nil {
		return true, del
	}
	stop := withRetry(ctx, "stop sandbox "+idOrName, b.opts(s), func(ctx context.Context) error {
		return b.bare(idOrName).StopWithTimeout(ctx, 0, false)
	})
	if stop != nil {
		return true, fmt.Errorf("daytona: %w; stopping failed too: %w", del, stop)
	}
	return true, fmt.Errorf("daytona sandbox %s: %w (%v)", idOrName, ErrStoppedInstead, del)
}

// Destroy deletes a sandbox. Sandboxes of other processes may be destroyed
// too, but only those carrying rlhost.managed=true.
func (b *Backend) Destroy(ctx context.Context, id string) error {
	s, err := b.ready()
	if err != nil {
		return err
	}
	b.mu.Lock()
	t := b.byID[id]
	b.mu.Unlock()
	if t != nil {
		_, err := b.remove(ctx, t)
		if err == nil || errors.Is(err, ErrStoppedInstead) {
			// A stopped sandbox no longer runs, so it frees its slot; it
			// stays on record and Shutdown deletes it.
			b.mu.Lock()
			free := t.slot
			t.slot = false
			b.mu.Unlock()
			if free {
				b.live.Put()
			}
		}
		return err
	}
	got, err := b.getDTO(ctx, s, id)
	if err != nil {
		return err
	}
	if got.Labels[managedLabel] != "true" {
		return fmt.Errorf("daytona sandbox %s has no %s=true label: not made by rlhost, not deleting it", id, managedLabel)
	}
	if err := b.deleteOrStop(ctx, got.Id); err != nil {
		return err
	}
	b.mu.Lock()
	delete(b.foreign, got.Id)
	b.mu.Unlock()
	return nil
}

// getDTO reads the raw API model, which unlike the SDK's Sandbox keeps
// labels and the creation time.
func (b *Backend) getDTO(ctx context.Context, s settings, id string) (*apiclient.Sandbox, error) {
	var out *apiclient.Sandbox
	err := withRetry(ctx, "get sandbox "+id, b.opts(s), func(ctx context.Context) error {
		got, resp, err := b.api.SandboxAPI.GetSandbox(b.auth(ctx, s), id).Execute()
		if err != nil {
			return apiError(err, resp)
		}
		out = got
		return nil
	})
	return out, err
}

func (b *Backend) auth(ctx context.Context, s settings) context.Context {
	return context.WithValue(ctx, apiclient.ContextAccessToken, s.apiKey)
}

// List returns the rlhost-managed sandboxes whose labels include labels.
func (b *Backend) List(ctx context.Context, labels map[string]string) ([]core.SandboxInfo, error) {
	s, err := b.ready()
	if err != nil {
		return nil, err
	}
	return b.list(ctx, s, labels)
}

func (b *Backend) list(ctx context.Context, s settings, labels map[string]string) ([]core.SandboxInfo, error) {
	filter := map[string]string{managedLabel: "true"}
	for k, v := range labels {
		filter[k] = v
	}
	q, _ := json.Marshal(filter)
	var out []core.SandboxInfo
	for page := 1; ; page++ {
		var res *apiclient.PaginatedSandboxes
		err := withRetry(ctx, "list sandboxes", b.opts(s), func(ctx context.Context) error {
			got, resp, err := b.api.SandboxAPI.ListSandboxesPaginated(b.auth(ctx, s)).
				Labels(string(q)).Page(float32(page)).Limit(100).Execute()
			if err != nil {
				return apiError(err, resp)
			}
			res = got
			return nil
		})
		if err != nil {
			return nil, err
		}
		for _, it := range res.Items {
			out = append(out, infoOf(it))
		}
		if page >= int(res.TotalPages) || len(res.Items) == 0 {
			return out, nil
		}
	}
}

func infoOf(d apiclient.Sandbox) core.SandboxInfo {
	created, _ := time.Parse(time.RFC3339Nano, d.GetCreatedAt())
	return core.SandboxInfo{
		ID: d.Id, Backend: backendName, Labels: d.Labels, State: string(d.GetState()),
		CreatedAt: created, Isolation: isolationCloud,
	}
}

// ReapOrphans deletes sandboxes whose owner is a dead process on this host:
// first those in the state files that dead processes left, then those found
// by label. See owner for what "dead" means.
func (b *Backend) ReapOrphans(ctx context.Context) ([]core.SandboxInfo, error) {
	s, err := b.ready()
	if err != nil {
		return nil, err
	}
	var removed []core.SandboxInfo
	var errs []error
	seen := map[string]bool{}

	err = b.state.sweep(b.host, s.apiURL, func(rec stateRecord) (*stateRecord, error) {
		left := stateRecord{Owner: rec.Owner, APIURL: rec.APIURL, RunID: rec.RunID, Sandboxes: map[string]stateEntry{}}
		var errs []error
		for _, name := range rec.sortedNames() {
			e := rec.Sandboxes[name]
			key := e.ID
			if key == "" {
				key = name
			}
			found, err := b.deleteOrStopFound(ctx, key)
			if err != nil {
				errs = append(errs, err)
				left.Sandboxes[name] = e
				continue
			}
			seen[key] = true
			if found {
				removed = append(removed, core.SandboxInfo{ID: key, Backend: backendName, CreatedAt: e.CreatedAt, Isolation: isolationCloud,
					Labels: map[string]string{runLabel: rec.RunID}})
			}
		}
		if len(left.Sandboxes) == 0 {
			return nil, errors.Join(errs...)
		}
		return &left, errors.Join(errs...)
	})
	if err != nil {
		errs = append(errs, err)
	}

	list, err := b.list(ctx, s, map[string]string{ownerHostLabel: b.host})
	if err != nil {
		return removed, errors.Join(append(errs, err)...)
	}
	for _, sb := range list {
		o, ok := procowner.FromLabels(sb.Labels)
		if !ok || seen[sb.ID] || !o.Dead(b.host) {
			continue
		}
		if err := b.deleteOrStop(ctx, sb.ID); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, sb)
	}
	return removed, errors.Join(errs...)
}

// Shutdown deletes every sandbox this process created. Creates in flight
// are cancelled and waited for first, so none slips through. If ctx is
// already over (the host is in a hurry), it still spends one api_timeout
// on the deletes: a sandbox left behind costs money until auto-stop.
func (b *Backend) Shutdown(ctx context.Context) error {
	b.mu.Lock()
	configured, s := b.configured, b.s
	b.mu.Unlock()
	if configured && ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), s.apiTimeout)
		defer cancel()
	}
	// A call that outlives ctx is not waited for: the deletes below must
	// still run.
	if first, _ := b.gate.Close(ctx); !first || !configured {
		return nil
	}

	b.mu.Lock()
	all := make([]*tracked, 0, len(b.byName))
	for _, t := range b.byName {
		all = append(all, t)
	}
	b.mu.Unlock()
	errs := make([]error, len(all))
	sem := pace.NewCap(8)
	var wg sync.WaitGroup
	for i, t := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := sem.Take(ctx); err != nil {
				errs[i] = fmt.Errorf("daytona: sandbox %s left behind: %w", t.name, err)
				return
			}
			defer sem.Put()
			_, errs[i] = b.remove(ctx, t)
		}()
	}
	wg.Wait()
	b.state.close()
	b.client.Close(ctx)
	return errors.Join(errs...)
}
