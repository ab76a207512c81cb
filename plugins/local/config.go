package local

import (
	"os"
	"path/filepath"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/core/sdk/sandboxplugin"
	"github.com/rlhost/rlhost/plugins/backendkit/statedir"
	"github.com/rlhost/rlhost/plugins/local/sandboxinit"
)

// Config is the backend-specific part of a `sandbox "x" { backend = "local" }`
// block. The common settings (rootfs, env, limits, network, ...) arrive as a
// core.SandboxSpec instead.
type Config struct {
	Isolation    string  `json:"isolation"`     // "namespaces" | "none"
	Cgroup       string  `json:"cgroup"`        // "auto" | "v2" | "v1" | "off"
	Workspace    string  `json:"workspace"`     // "tmpfs" | "host"
	StateDir     string  `json:"state_dir"`     // "" = per-user default
	PoolSize     int     `json:"pool_size"`     // pre-warmed sandboxes
	Recycle      *bool   `json:"recycle"`       // reset destroyed sandboxes for reuse; nil = where possible
	MaxSandboxes int     `json:"max_sandboxes"` // hard cap; 0 = unlimited
	CreateRate   float64 `json:"create_rate"`   // creates per second; 0 = unlimited
	Helper       string  `json:"helper"`        // re-exec binary; "" = os.Executable()
	UIDBase      int64   `json:"uid_base"`      // host uid range for sandbox root (when run as root)
	RootView     string  `json:"root_view"`     // "runtime" | "host"
	Seccomp      string  `json:"seccomp"`       // "default" | "off"
	Mount        []Mount `json:"mount"`         // host paths added to the view
}

// Mount is one `mount { }` block: a host path shown in the sandbox.
type Mount struct {
	Source   string `json:"source"`   // host path; relative to the config file
	Target   string `json:"target"`   // path in the sandbox; default: the source's absolute path
	Writable bool   `json:"writable"` // default read-only
}

// Defaults for limits the spec leaves at zero. Documented in docs/local-sandbox.md.
const (
	defaultMemory      = 2 << 30
	defaultPids        = 512
	defaultFileSize    = 1 << 30
	defaultOpenFiles   = 1024
	defaultTmpBytes    = 256 << 20
	defaultDiskBytes   = 1 << 30
	defaultOutputBytes = 1 << 20
	defaultReadMax     = 64 << 20
	maxOutputBytes     = 128 << 20
	defaultUIDBase     = 0x70000000
	uidRange           = 1 << 20
)

func configSpec() schema.Spec {
	d := defaultConfig()
	return schema.Spec{Attributes: []schema.Attribute{
		schema.String("isolation", `"namespaces" (user, mount, PID, network, IPC, UTS namespaces + cgroup limits) or "none" (trusted code only: no isolation at all)`).WithDefault(d.Isolation),
		schema.String("cgroup", `"auto", "v2", "v1" or "off" (memory then falls back to per-process RLIMIT_AS and pids to RLIMIT_NPROC)`).WithDefault(d.Cgroup),
		schema.String("workspace", `"tmpfs" (size-capped by limits.disk, charged to the sandbox's memory) or "host" (a directory in state_dir, no size cap)`).WithDefault(d.Workspace),
		schema.String("state_dir", "where sandboxes are recorded; default /var/lib/rlhost/local for root, else $XDG_STATE_HOME/rlhost/local").WithDefault(""),
		schema.Number("pool_size", "sandboxes kept pre-warmed").WithDefault(0),
		// No default: unset means "where the settings allow it", which an
		// explicit true would make an error.
		schema.Bool("recycle", "reset a destroyed sandbox (every process killed, /tmp, /run, /dev/shm and /workspace emptied, IPC objects removed) and keep it for the next create instead of creating a new one, up to pool_size or, with no pool, as many as were alive at once; default: on with isolation = \"namespaces\" and workspace = \"tmpfs\", else off"),
		schema.Number("max_sandboxes", "hard cap on sandboxes alive at once in this process, counted from creation start; 0 = no cap").WithDefault(d.MaxSandboxes),
		schema.Number("create_rate", "maximum sandbox creations per second; 0 = unlimited").WithDefault(0),
		schema.String("helper", "binary run as the sandbox init (must call local.Reexec or sandboxinit.Reexec first); default: rlhost-sandbox-init beside this executable if present, else this executable").WithDefault(""),
		schema.Number("uid_base", "when rlhost runs as root, sandbox root maps to a host uid in [uid_base, uid_base+2^20)").WithDefault(d.UIDBase),
		schema.String("root_view", `"runtime": the sandbox sees the host's /usr, /bin, /sbin, /lib* and a curated /etc, nothing else of the host; "host": every top-level entry of the host root, read-only (UNSAFE for untrusted code: shows every world-readable file on the machine)`).WithDefault(d.RootView),
		schema.String("seccomp", `"default": a seccomp filter denies (EPERM) keyrings, bpf, perf, userfaultfd, io_uring, mounts, namespaces, module loading, ptrace and more; "off": no filter (debugging only; every exec result says so)`).WithDefault(d.Seccomp),
	}, Blocks: []schema.Block{
		schema.ListBlock("mount", "a host path shown in the sandbox, read-only unless writable = true; repeat the block for more", schema.Spec{Attributes: []schema.Attribute{
			schema.String("source", "host path (file or directory); relative paths are relative to the config file").MarkRequired(),
			schema.String("target", "absolute path in the sandbox; default: the source's absolute path").WithDefault(""),
			schema.Bool("writable", "bind read-write (changes reach the host)").WithDefault(false),
		}}),
	}}
}

func defaultConfig() Config {
	return Config{Isolation: "namespaces", Cgroup: "auto", Workspace: "tmpfs", MaxSandboxes: 256,
		UIDBase: defaultUIDBase, RootView: "runtime", Seccomp: "default"}
}

// settings is Config after validation, plus the values derived from it.
type settings struct {
	Config
	recycle  bool // the recycle setting, its default applied
	stateDir string
	helper   string
	mounts   []sandboxinit.Bind // the mount blocks, resolved
	seccomp  []byte             // the filter program; nil with seccomp = "off"
	view     struct {           // the runtime root view, read from the host at Configure
		binds []sandboxinit.Bind
		links []sandboxinit.Link
		files []sandboxinit.File
	}
}

// isolationName is what every exec result and sandbox record reports.
func (s *settings) isolationName() string {
	if s.Isolation == "namespaces" && s.Seccomp == "off" {
		return "namespaces (seccomp off)"
	}
	return s.Isolation
}

// helperName is the dedicated init binary (cmd/rlhost-sandbox-init).
const helperName = "rlhost-sandbox-init"

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}

// validate checks the backend config; paths are attribute names.
func (c Config) validate(cfgBase schema.Config) (settings, schema.Diagnostics) {
	var diags schema.Diagnostics
	s := settings{Config: c}
	switch c.Isolation {
	case "namespaces", "none":
	default:
		diags = append(diags, schema.Errorf([]string{"isolation"}, "unknown isolation", `%q: want "namespaces" or "none"`, c.Isolation))
	}
	switch c.Cgroup {
	case "auto", "v1", "v2", "off":
	default:
		diags = append(diags, schema.Errorf([]string{"cgroup"}, "unknown cgroup mode", `%q: want "auto", "v2", "v1" or "off"`, c.Cgroup))
	}
	switch c.Workspace {
	case "tmpfs", "host":
	default:
		diags = append(diags, schema.Errorf([]string{"workspace"}, "unknown workspace kind", `%q: want "tmpfs" or "host"`, c.Workspace))
	}
	switch c.RootView {
	case "runtime", "host":
	default:
		diags = append(diags, schema.Errorf([]string{"root_view"}, "unknown root_view", `%q: want "runtime" or "host"`, c.RootView))
	}
	if c.RootView == "host" && c.Isolation == "namespaces" {
		diags = append(diags, schema.Diagnostic{Severity: schema.Warning, Path: []string{"root_view"},
			Summary: `root_view = "host": sandboxes see every world-readable file of this machine`,
			Detail:  "home directories, other projects' checkouts and .env files, datasets: model-written code can read them and print them into its observations; use the default \"runtime\" view plus mount blocks for untrusted code"})
	}
	switch c.Seccomp {
	case "default":
		if c.Isolation == "namespaces" {
			prog, err := seccompProgram()
			if err != nil {
				diags = append(diags, schema.Errorf([]string{"seccomp"}, "cannot build the seccomp filter", "%v", err))
			}
			s.seccomp = prog
		}
	case "off":
	default:
		diags = append(diags, schema.Errorf([]string{"seccomp"}, "unknown seccomp mode", `%q: want "default" or "off"`, c.Seccomp))
	}
	if c.Isolation == "namespaces" && c.RootView == "runtime" {
		s.view.binds, s.view.links, s.view.files = runtimeView("/")
	}
	if c.Isolation == "none" && c.Workspace == "tmpfs" {
		// Without a mount namespace there is nowhere private to mount a tmpfs.
		s.Workspace = "host"
	}
	if c.PoolSize < 0 || c.PoolSize > 4096 {
		diags = append(diags, schema.Errorf([]string{"pool_size"}, "pool_size out of range", "%d: want 0..4096", c.PoolSize))
	}
	switch {
	case c.Recycle == nil:
		s.recycle = c.Isolation == "namespaces" && c.Workspace == "tmpfs"
	case *c.Recycle && c.Isolation != "namespaces":
		diags = append(diags, schema.Errorf([]string{"recycle"}, "recycle needs isolation = \"namespaces\"", "without a PID namespace a sandbox's processes cannot all be found and killed"))
	case *c.Recycle && c.Workspace != "tmpfs":
		diags = append(diags, schema.Errorf([]string{"recycle"}, "recycle needs workspace = \"tmpfs\"", "a host-directory workspace cannot be emptied safely while the sandbox lives"))
	default:
		s.recycle = *c.Recycle
	}
	if c.MaxSandboxes < 0 {
		diags = append(diags, schema.Errorf([]string{"max_sandboxes"}, "max_sandboxes must be >= 0", "got %d", c.MaxSandboxes))
	}
	if c.MaxSandboxes > 0 && c.PoolSize > c.MaxSandboxes {
		diags = append(diags, schema.Errorf([]string{"pool_size"}, "pool_size exceeds max_sandboxes", "%d > %d", c.PoolSize, c.MaxSandboxes))
	}
	if c.CreateRate < 0 {
		diags = append(diags, schema.Errorf([]string{"create_rate"}, "create_rate must be >= 0", "got %g", c.CreateRate))
	}
	if c.UIDBase < 1 || c.UIDBase+uidRange > 1<<32-2 {
		diags = append(diags, schema.Errorf([]string{"uid_base"}, "uid_base out of range", "%d", c.UIDBase))
	}
	s.stateDir = c.StateDir
	if s.stateDir == "" {
		s.stateDir = statedir.Machine("local")
	} else {
		s.stateDir = cfgBase.Path(s.stateDir)
	}
	for i, m := range c.Mount {
		b, d := resolveMount(cfgBase, i, m, c.Isolation, s.stateDir)
		diags = append(diags, d...)
		if !d.HasErrors() {
			s.mounts = append(s.mounts, b)
		}
	}
	s.helper = c.Helper
	if s.helper == "" {
		exe, err := os.Executable()
		if err != nil {
			diags = append(diags, schema.Errorf([]string{"helper"}, "cannot find own executable", "%v", err))
		}
		s.helper = exe
		// A dedicated init binary installed beside this one starts faster.
		if sib := filepath.Join(filepath.Dir(exe), helperName); isExecutable(sib) {
			s.helper = sib
		}
	} else {
		s.helper = cfgBase.Path(s.helper)
	}
	return s, diags
}

// checkSpec rejects spec fields this backend cannot honour under s.
func (s *settings) checkSpec(spec core.SandboxSpec, cg cgroupKind) schema.Diagnostics {
	var diags schema.Diagnostics
	lim := func(name string) []string { return []string{"limits", name} }
	if spec.Image != "" {
		diags = append(diags, schema.Errorf([]string{"image"}, "the local backend has no images",
			"image %q: use rootfs = \"/path/to/root\" (a directory) instead", spec.Image))
	}
	if spec.Rootfs != "" {
		if s.Isolation == "none" {
			diags = append(diags, schema.Errorf([]string{"rootfs"}, "rootfs needs isolation = \"namespaces\"", "with isolation = \"none\" commands see the host's root"))
		} else if st, err := os.Stat(spec.Rootfs); err != nil || !st.IsDir() {
			diags = append(diags, schema.Errorf([]string{"rootfs"}, "rootfs is not a directory", "%q: %v", spec.Rootfs, err))
		}
	}
	if spec.Workdir != "" && spec.Workdir[0] != '/' {
		diags = append(diags, schema.Errorf([]string{"workdir"}, "workdir must be absolute", "%q", spec.Workdir))
	}
	l := spec.Limits
	if l.OutputBytes > maxOutputBytes {
		diags = append(diags, schema.Errorf(lim("output"), "limits.output is too large", "%d > %d bytes: outputs travel in one message", l.OutputBytes, int64(maxOutputBytes)))
	}
	if s.Isolation == "none" {
		return append(diags, sandboxplugin.CheckLimits(l, `isolation = "none"`, []string{"cpu_time", "file_size", "open_files", "output"},
			`isolation = "none" only enforces the exec timeout and limits.cpu_time, file_size, open_files and output; use isolation = "namespaces" for %s`)...)
	}
	diags = append(diags, sandboxplugin.CheckLimits(l, "the local backend", []string{"memory", "cpu_time", "pids", "file_size", "open_files", "tmp", "output", "disk", "cpus"}, "")...)
	if l.DiskBytes != 0 && s.Workspace != "tmpfs" {
		diags = append(diags, schema.Errorf(lim("disk"), "limits.disk needs workspace = \"tmpfs\"",
			"a host-directory workspace has no size cap"))
	}
	if cg == cgroupOff {
		if l.CPUs != 0 {
			diags = append(diags, schema.Errorf(lim("cpus"), "cpus needs cgroups", "cgroup = \"off\" cannot limit CPU share"))
		}
		diags = append(diags, schema.Diagnostic{Severity: schema.Warning, Path: []string{"cgroup"},
			Summary: "cgroup = \"off\": memory is limited per process with RLIMIT_AS and pids with RLIMIT_NPROC",
			Detail:  "this is a last resort: a sandbox can use limits.memory in every process it starts"})
	}
	return diags
}

// orDefault is v, or def when v is not set (0 or less).
func orDefault(v, def int64) int64 {
	if v > 0 {
		return v
	}
	return def
}
