package pluginmgr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/sdk/envplugin"
	"github.com/rlhost/rlhost/core/sdk/pluginbase"
	"github.com/rlhost/rlhost/core/sdk/sandboxplugin"
	"github.com/rlhost/rlhost/core/sdk/wire/frames"
)

// Manager starts plugins and keeps track of them so none outlives the host.
type Manager struct {
	self     string
	builtins map[string][]string
	dirs     []string
	logger   hclog.Logger

	mu        sync.Mutex
	instances []*Instance
}

// Options configure a Manager.
type Options struct {
	Self     string              // the rlhost executable; os.Executable() if empty
	Builtins map[string][]string // kind → built-in plugin names
	Dirs     []string            // external plugin dirs; DefaultDirs() if nil
	Logger   hclog.Logger        // plugin logs are re-logged here under the plugin's name
}

// New makes a Manager, after removing the sockets that plugins killed
// with SIGKILL left in the temp directory (frames.SweepDeadSockets).
func New(o Options) (*Manager, error) {
	if o.Self == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find the rlhost executable to serve built-in plugins: %w", err)
		}
		o.Self = exe
	}
	if o.Dirs == nil {
		o.Dirs = DefaultDirs()
	}
	if o.Logger == nil {
		o.Logger = hclog.New(&hclog.LoggerOptions{Name: "rlhost", Level: hclog.Warn, Output: os.Stderr})
	}
	// Plugins killed with SIGKILL, host and all, cannot remove their
	// sockets; the next manager does.
	if gone := frames.SweepDeadSockets(); len(gone) > 0 {
		o.Logger.Debug("removed the sockets of plugins that are gone", "sockets", gone)
	}
	return &Manager{self: o.Self, builtins: o.Builtins, dirs: o.Dirs, logger: o.Logger}, nil
}

// Builtins returns the built-in plugin names of kind.
func (m *Manager) Builtins(kind string) []string { return m.builtins[kind] }

// Instance is one plugin process, restarted as needed. Callers fetch the
// current client for each use, so a restart is picked up transparently.
type Instance struct {
	m     *Manager
	src   Source
	env   []string                                 // the plugin's environment
	setup func(ctx context.Context, raw any) error // re-applied after each restart

	mu         sync.Mutex
	client     *plugin.Client
	raw        any
	info       pluginbase.Info
	restarts   int
	lastStart  time.Time
	restarting chan struct{} // non-nil while one caller restarts the plugin
	stopped    bool
}

// Restart policy: backoff doubles from restartBase up to restartCap; after
// maxRestarts restarts that each came soon after the previous one, give up.
const (
	restartBase = 200 * time.Millisecond
	restartCap  = 5 * time.Second
	maxRestarts = 5
	stableAfter = 30 * time.Second
	// stopTimeout bounds a plugin's Shutdown when the caller set no deadline.
	stopTimeout = 30 * time.Second
)

// ErrPluginExited is wrapped by errors from a plugin whose process died.
var ErrPluginExited = errors.New("plugin process exited")

// StartOptions adjust one plugin start.
type StartOptions struct {
	// PassEnv names host environment variables an env plugin may see in
	// addition to the safe defaults (see EnvPluginEnv). Sandbox backends
	// get the whole environment: they hold the credentials.
	PassEnv []string
}

// Start launches src, performs the handshake and Describe, and runs setup
// (typically Configure). setup runs again after every restart.
func (m *Manager) Start(ctx context.Context, src Source, setup func(ctx context.Context, raw any) error, opts ...StartOptions) (*Instance, error) {
	var o StartOptions
	for _, x := range opts {
		o.PassEnv = append(o.PassEnv, x.PassEnv...)
	}
	in := &Instance{m: m, src: src, setup: setup, env: pluginEnv(src.Kind, o.PassEnv)}
	if err := in.startOnce(ctx); err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.instances = append(m.instances, in)
	m.mu.Unlock()
	return in, nil
}

// pluginEnv is the environment a plugin process starts with. Environment
// plugins are third-party code that never needs backend or model
// credentials, so they get a short allow-list; backends get everything.
func pluginEnv(kind string, pass []string) []string {
	if kind != pluginbase.KindEnv {
		return os.Environ()
	}
	return EnvPluginEnv(os.Environ(), pass)
}

// EnvPluginEnv filters environ down to what an environment plugin may see:
// locale, paths, temp dirs, RLHOST_* and XDG_* settings, and the names in pass.
func EnvPluginEnv(environ []string, pass []string) []string {
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case slices.Contains([]string{"PATH", "HOME", "USER", "LOGNAME", "TMPDIR", "TMP", "TEMP", "LANG", "TZ", "TERM"}, name),
			strings.HasPrefix(name, "LC_"), strings.HasPrefix(name, "RLHOST_"), strings.HasPrefix(name, "XDG_"),
			name == "GOCOVERDIR", slices.Contains(pass, name):
			out = append(out, kv)
		}
	}
	return out
}

// startOnce launches a process and installs it as the current one, unless
// the instance was stopped meanwhile.
func (in *Instance) startOnce(ctx context.Context) error {
	client, raw, info, err := in.launch(ctx)
	if err != nil {
		return err
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.stopped {
		shutdown(raw)
		client.Kill()
		return fmt.Errorf("%s: %w (stopped while starting)", in.src, ErrPluginExited)
	}
	in.client, in.raw, in.info, in.lastStart = client, raw, info, time.Now()
	return nil
}

// launch starts one plugin process and configures it; it touches no state
// of the instance, so it runs without the lock.
func (in *Instance) launch(ctx context.Context) (*plugin.Client, any, pluginbase.Info, error) {
	src := in.src
	cmd := exec.Command(src.Path, src.Args...)
	// The kernel signals the plugin if the host dies, even by SIGKILL. SIGTERM
	// rather than SIGKILL, so a backend can still delete its sandboxes (the
	// SDK runs its Shutdown, bounded); the SDK's parent watch covers the
	// case where the forking thread exits first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	cmd.Env = in.env
	logger := in.m.logger.Named(src.Kind + "." + src.Name)
	// Until the handshake, the plugin's log is held and its stderr kept:
	// a plugin that dies first is reported once, by what it said.
	gate, tail := newStartGate(joinStacks(logger)), &stderrTail{}
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  pluginbase.HandshakeConfig(),
		Plugins:          map[string]plugin.Plugin{pluginbase.KindEnv: &envplugin.Plugin{Logger: logger}, pluginbase.KindSandbox: &sandboxplugin.Plugin{}},
		Cmd:              cmd,
		SkipHostEnv:      true, // cmd.Env is already exactly what the plugin may see
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           gate, // joinStacks: a crash trace prints as one block
		Stderr:           tail,
		StartTimeout:     20 * time.Second,
		GRPCDialOptions:  pluginbase.DialOptions(),
		SyncStdout:       io.Discard,
		SyncStderr:       io.Discard,
	})
	rpc, err := client.Client()
	if err != nil {
		client.Kill() // returns once the plugin's stderr is read to its end
		gate.release(true)
		return nil, nil, pluginbase.Info{}, startError(src, err, tail.Lines(), cmd.ProcessState)
	}
	gate.release(false)
	raw, err := rpc.Dispense(src.Kind)
	if err != nil {
		client.Kill()
		return nil, nil, pluginbase.Info{}, fmt.Errorf("start %s: it does not serve a %s plugin: %w", src, src.Kind, err)
	}
	var info pluginbase.Info
	switch c := raw.(type) {
	case *envplugin.Client:
		info = c.Info()
	case *sandboxplugin.Client:
		info = c.Info()
	}
	if in.setup != nil {
		if err := in.setup(ctx, raw); err != nil {
			shutdown(raw)
			client.Kill()
			return nil, nil, info, err
		}
	}
	return client, raw, info, nil
}

// Source returns how the plugin was launched.
func (in *Instance) Source() Source { return in.src }

// Info returns the plugin's description.
func (in *Instance) Info() pluginbase.Info {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.info
}

// Exited reports whether the current plugin process has died (or is being
// replaced).
func (in *Instance) Exited() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.client == nil || in.client.Exited()
}

// get returns a live client, restarting the plugin with backoff if its
// process died. One caller leads a restart; the others wait for it, so one
// crash is one restart, however many episodes notice it.
func (in *Instance) get(ctx context.Context) (any, error) {
	for {
		in.mu.Lock()
		if in.stopped {
			in.mu.Unlock()
			return nil, fmt.Errorf("%s: %w (stopped)", in.src, ErrPluginExited)
		}
		if in.client != nil && !in.client.Exited() {
			raw := in.raw
			in.mu.Unlock()
			return raw, nil
		}
		if ch := in.restarting; ch != nil {
			in.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if time.Since(in.lastStart) > stableAfter {
			in.restarts = 0
		}
		if in.restarts >= maxRestarts {
			n := in.restarts
			in.mu.Unlock()
			return nil, fmt.Errorf("%s crashed %d times in a row; not restarting: %w", in.src, n, ErrPluginExited)
		}
		in.restarts++
		n := in.restarts
		old := in.client
		in.client, in.raw = nil, nil
		done := make(chan struct{})
		in.restarting = done
		in.mu.Unlock()

		if old != nil {
			old.Kill()
		}
		delay := min(restartBase<<(n-1), restartCap)
		in.m.logger.Warn("plugin exited; restarting", "plugin", in.src.String(), "attempt", n, "backoff", delay)
		var err error
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-time.After(delay):
			err = in.startOnce(ctx)
		}
		in.mu.Lock()
		in.restarting = nil
		close(done)
		raw := in.raw
		in.mu.Unlock()
		if err != nil {
			return nil, fmt.Errorf("restart %s: %w", in.src, err)
		}
		return raw, nil
	}
}

// Env returns the live environment client.
func (in *Instance) Env(ctx context.Context) (*envplugin.Client, error) {
	raw, err := in.get(ctx)
	if err != nil {
		return nil, err
	}
	c, ok := raw.(*envplugin.Client)
	if !ok {
		return nil, fmt.Errorf("%s is not an environment plugin", in.src)
	}
	return c, nil
}

// Backend returns the live sandbox backend client.
func (in *Instance) Backend(ctx context.Context) (*sandboxplugin.Client, error) {
	raw, err := in.get(ctx)
	if err != nil {
		return nil, err
	}
	c, ok := raw.(*sandboxplugin.Client)
	if !ok {
		return nil, fmt.Errorf("%s is not a sandbox backend plugin", in.src)
	}
	return c, nil
}

// Crashed turns an error from a call into one wrapping ErrPluginExited
// when the plugin process is gone, so callers can record "plugin crashed"
// rather than a transport error. It keeps the original error in the chain.
func (in *Instance) Crashed(err error) error {
	if err == nil {
		return nil
	}
	if in.exitedAfter(err) {
		return fmt.Errorf("%s: %w: %w", in.src, ErrPluginExited, err)
	}
	return err
}

// exitedAfter decides whether err came from a dead plugin. An Unavailable
// error can also be relayed by a healthy plugin (a backend's cloud API
// failing), so the plugin is pinged rather than presumed dead; only when the
// ping fails do we wait, briefly, for go-plugin to reap the process.
func (in *Instance) exitedAfter(err error) bool {
	in.mu.Lock()
	client := in.client
	in.mu.Unlock()
	if client == nil || client.Exited() {
		return true
	}
	if !errors.Is(err, core.ErrUnavailable) {
		return false
	}
	if rpc, cerr := client.Client(); cerr == nil && rpc.Ping() == nil {
		return false
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if client.Exited() {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Unreachable but not (yet) exited: treat it as dead; get() will kill
	// and replace it.
	client.Kill()
	return true
}

// Stop asks the plugin to shut down (our own RPC: go-plugin's Kill is not
// graceful), then kills it. It is safe to call more than once. Without a
// deadline on ctx, the shutdown gets stopTimeout.
func (in *Instance) Stop(ctx context.Context) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, stopTimeout)
		defer cancel()
	}
	in.mu.Lock()
	if in.stopped {
		in.mu.Unlock()
		return
	}
	in.stopped = true
	client, raw := in.client, in.raw
	in.mu.Unlock()
	if client == nil {
		return
	}
	if !client.Exited() {
		done := make(chan struct{})
		go func() {
			defer close(done)
			shutdownCtx(ctx, raw)
		}()
		select {
		case <-done:
		case <-ctx.Done():
			in.m.logger.Warn("plugin did not shut down in time; killing it", "plugin", in.src.String())
		}
	}
	client.Kill()
}

func shutdown(raw any) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	shutdownCtx(ctx, raw)
}

func shutdownCtx(ctx context.Context, raw any) {
	switch c := raw.(type) {
	case *envplugin.Client:
		_ = c.Shutdown(ctx)
	case *sandboxplugin.Client:
		_ = c.Shutdown(ctx)
	}
}

// StopAll stops every plugin this manager started, envs first so their
// episodes end before the sandboxes under them go away.
func (m *Manager) StopAll(ctx context.Context) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, stopTimeout)
		defer cancel()
	}
	m.mu.Lock()
	ins := append([]*Instance(nil), m.instances...)
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, kind := range []string{pluginbase.KindEnv, pluginbase.KindSandbox} {
		for _, in := range ins {
			if in.src.Kind != kind {
				continue
			}
			wg.Add(1)
			go func(in *Instance) {
				defer wg.Done()
				in.Stop(ctx)
			}(in)
		}
		wg.Wait()
	}
}

// Probe starts a plugin just to read its Info, then stops it.
func (m *Manager) Probe(ctx context.Context, src Source) (pluginbase.Info, error) {
	in := &Instance{m: m, src: src, env: pluginEnv(src.Kind, nil)}
	if err := in.startOnce(ctx); err != nil {
		return pluginbase.Info{}, err
	}
	info := in.Info()
	in.Stop(ctx)
	return info, nil
}
