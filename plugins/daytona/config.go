package daytona

import (
	"math"
	"strings"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/duration"
	"github.com/rlhost/rlhost/core/labels"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/core/sdk/sandboxplugin"
)

// Defaults of the backend settings.
const (
	defaultAPIURL        = "https://app.daytona.io/api"
	defaultAPITimeout    = 30 * time.Second
	defaultStartTimeout  = 5 * time.Minute
	defaultOutputBytes   = 1 << 20  // per stream per exec, as the local backend
	defaultReadBytes     = 16 << 20 // ReadFile cap when the caller gives none
	defaultAutoStop      = 60       // minutes, when neither auto_stop_interval nor ttl is set
	defaultMaxStarting   = 8
	defaultCreateRate    = 4.0
	defaultMaxRetries    = 5
	gib                  = 1 << 30
	autoDeleteDisabled   = -1
	apiKeyEnv            = "DAYTONA_API_KEY"
	apiURLEnv            = "DAYTONA_API_URL"
	targetEnv            = "DAYTONA_TARGET"
	managedLabel         = labels.Managed
	runLabel             = labels.Run
	ownerHostLabel       = labels.OwnerHost
	ownerPIDLabel        = labels.OwnerPID
	ownerStartLabel      = labels.OwnerStart
	isolationCloud       = "cloud"
	backendName          = "daytona"
	backendVersion       = "0.1.0"
	maxInlineScriptBytes = 96 << 10 // keeps `sh -c` below Linux's 128 KiB per-argument limit
)

// Config is the daytona-specific part of a `sandbox` block. Durations are
// read by core/duration ("90s", "45m").
type Config struct {
	APIKey             string  `json:"api_key"`
	APIURL             string  `json:"api_url"`
	Target             string  `json:"target"`
	Snapshot           string  `json:"snapshot"`
	AutoStopInterval   string  `json:"auto_stop_interval"`
	AutoDeleteInterval string  `json:"auto_delete_interval"`
	Ephemeral          bool    `json:"ephemeral"`
	NetworkBlockAll    bool    `json:"network_block_all"`
	NetworkAllowList   string  `json:"network_allow_list"`
	MaxSandboxes       int     `json:"max_sandboxes"`
	MaxStarting        int     `json:"max_starting"`
	CreateRate         float64 `json:"create_rate"`
	APITimeout         string  `json:"api_timeout"`
	StartTimeout       string  `json:"start_timeout"`
	MaxRetries         int     `json:"max_retries"`
	StateDir           string  `json:"state_dir"`
}

// configSpec is the schema the host decodes the block against.
func configSpec() schema.Spec {
	key := schema.String("api_key", "Daytona API key; empty reads $"+apiKeyEnv+". Never logged.").WithDefault("").MarkSensitive()
	return schema.Spec{Attributes: []schema.Attribute{
		key,
		schema.String("api_url", "API URL; empty reads $"+apiURLEnv+", else "+defaultAPIURL).WithDefault(""),
		schema.String("target", "region to create sandboxes in; empty reads $"+targetEnv+", else the account default").WithDefault(""),
		schema.String("snapshot", "Daytona snapshot to start from, instead of the block's image").WithDefault(""),
		schema.String("auto_stop_interval", "Daytona stops a sandbox idle this long (dead-man's switch); empty derives it from ttl, else 60m").WithDefault(""),
		schema.String("auto_delete_interval", `how long after stopping Daytona deletes a sandbox; "0s" at once, "never" keeps it`).WithDefault("0s"),
		schema.Bool("ephemeral", "delete sandboxes as soon as they stop (forces auto_delete_interval = 0s)").WithDefault(false),
		schema.Bool("network_block_all", "block all network access; what network = false already does, and an error with network = true").WithDefault(false),
		schema.String("network_allow_list", "comma-separated CIDRs reachable from the sandbox; needs network = true").WithDefault(""),
		schema.Number("max_sandboxes", "most sandboxes alive at once from this block; Create waits for a slot. 0 = no cap").WithDefault(0),
		schema.Number("max_starting", "most sandboxes being created and started at once").WithDefault(defaultMaxStarting),
		schema.Number("create_rate", "most create calls per second").WithDefault(defaultCreateRate),
		schema.String("api_timeout", "timeout of each API call attempt (not of exec)").WithDefault("30s"),
		schema.String("start_timeout", "how long Create waits for a sandbox to reach STARTED").WithDefault("5m"),
		schema.Number("max_retries", "retries of a call that got 429 or 5xx").WithDefault(defaultMaxRetries),
		schema.String("state_dir", "where the per-user record of live sandboxes is kept; empty = $XDG_STATE_HOME/rlhost/daytona").WithDefault(""),
	}}
}

// settings is a validated Config with the spec-derived create parameters.
type settings struct {
	apiKey, apiURL, target string
	snapshot, image        string
	labels                 map[string]string
	cfgBlockAll            bool
	autoStopFixed          bool
	env                    map[string]string
	cpus, memGiB, diskGiB  int
	autoStop, autoDelete   int // minutes
	ephemeral              bool
	blockAll               bool
	allowList              string
	maxSandboxes           int
	maxStarting            int
	createRate             float64
	apiTimeout             time.Duration
	startTimeout           time.Duration
	outputBytes            int64
	maxRetries             int
	stateDir               string
	workdir                string
	runID                  string
}

// validate turns a Config and the block's SandboxSpec into settings. Every
// field Daytona cannot honour is an error diagnostic whose Path names the
// attribute; lossy conversions (rounding up to whole GiB or vCPUs) are
// warnings.
func validate(c Config, spec core.SandboxSpec, runID string, getenv func(string) string) (settings, schema.Diagnostics) {
	s, d := validateConfig(c, runID, getenv)
	return s.withSpec(spec, d)
}

// diagnoser collects diagnostics.
type diagnoser struct{ d schema.Diagnostics }

func (x *diagnoser) errf(p []string, summary, detail string, args ...any) {
	x.d = append(x.d, schema.Errorf(p, summary, detail, args...))
}

func (x *diagnoser) warnf(p []string, summary, detail string, args ...any) {
	x.d = append(x.d, schema.Warnf(p, summary, detail, args...))
}

// validateConfig checks the daytona-specific settings alone.
func validateConfig(c Config, runID string, getenv func(string) string) (settings, schema.Diagnostics) {
	x := &diagnoser{}
	errf := x.errf
	s := settings{
		apiKey: c.APIKey, apiURL: c.APIURL, target: c.Target,
		snapshot: c.Snapshot, cfgBlockAll: c.NetworkBlockAll,
		ephemeral: c.Ephemeral, allowList: strings.TrimSpace(c.NetworkAllowList),
		maxSandboxes: c.MaxSandboxes, maxStarting: c.MaxStarting, createRate: c.CreateRate,
		maxRetries: c.MaxRetries, stateDir: c.StateDir, runID: runID,
	}
	if s.apiKey == "" {
		s.apiKey = getenv(apiKeyEnv)
	}
	if s.apiKey == "" {
		errf([]string{"api_key"}, "no Daytona API key", "set %s in the environment or api_key in the sandbox block", apiKeyEnv)
	}
	if s.apiURL == "" {
		s.apiURL = getenv(apiURLEnv)
	}
	if s.apiURL == "" {
		s.apiURL = defaultAPIURL
	}
	if !strings.HasPrefix(s.apiURL, "http://") && !strings.HasPrefix(s.apiURL, "https://") {
		errf([]string{"api_url"}, "invalid api_url", "%q is not an http(s) URL", s.apiURL)
	}
	if s.target == "" {
		s.target = getenv(targetEnv)
	}

	dur := func(name, v string, def time.Duration) time.Duration {
		x, err := duration.PositiveOr(v, def)
		if err != nil {
			errf([]string{name}, "invalid duration", "%v", err)
			return def
		}
		return x
	}
	s.apiTimeout = dur("api_timeout", c.APITimeout, defaultAPITimeout)
	s.startTimeout = dur("start_timeout", c.StartTimeout, defaultStartTimeout)

	// Dead-man's switch: Daytona stops a sandbox after auto_stop minutes
	// without activity and deletes it auto_delete minutes later. When rlhost
	// dies the activity stops, so the sandbox is gone within about ttl.
	s.autoStop = defaultAutoStop
	if c.AutoStopInterval != "" {
		s.autoStop = ceilMinutes(dur("auto_stop_interval", c.AutoStopInterval, time.Hour))
		s.autoStopFixed = true
	}
	switch v := strings.TrimSpace(c.AutoDeleteInterval); v {
	case "", "0", "0s":
		s.autoDelete = 0
	case "never":
		s.autoDelete = autoDeleteDisabled
	default:
		s.autoDelete = ceilMinutes(dur("auto_delete_interval", v, 0))
	}
	if s.ephemeral && s.autoDelete != 0 {
		errf([]string{"ephemeral"}, "ephemeral contradicts auto_delete_interval", "an ephemeral sandbox is deleted as soon as it stops; drop auto_delete_interval")
	}

	if s.maxSandboxes < 0 {
		errf([]string{"max_sandboxes"}, "invalid max_sandboxes", "want 0 (no cap) or a positive number")
	}
	if s.maxStarting == 0 {
		s.maxStarting = defaultMaxStarting
	}
	if s.maxStarting < 0 {
		errf([]string{"max_starting"}, "invalid max_starting", "want a positive number")
	}
	if s.createRate == 0 {
		s.createRate = defaultCreateRate
	}
	if s.createRate < 0 || math.IsInf(s.createRate, 0) || math.IsNaN(s.createRate) {
		errf([]string{"create_rate"}, "invalid create_rate", "want a positive number of creates per second")
	}
	if s.maxRetries < 0 {
		errf([]string{"max_retries"}, "invalid max_retries", "want 0 or more")
	}
	return s, x.d
}

// withSpec adds what the block's common settings ask for; the host calls
// Configure with the block's spec and Create with per-sandbox specs.
func (s settings) withSpec(spec core.SandboxSpec, d schema.Diagnostics) (settings, schema.Diagnostics) {
	x := &diagnoser{d: d}
	errf, warnf := x.errf, x.warnf
	s.image, s.outputBytes, s.workdir = spec.Image, spec.Limits.OutputBytes, spec.Workdir
	s.cpus, s.memGiB, s.diskGiB = 0, 0, 0
	if !s.autoStopFixed {
		s.autoStop = defaultAutoStop
		if spec.TTL > 0 {
			s.autoStop = ceilMinutes(spec.TTL)
		}
	}
	// What Daytona cannot honour.
	if spec.Rootfs != "" {
		errf([]string{"rootfs"}, "rootfs is not supported by the daytona backend", "Daytona sandboxes start from an image or a snapshot; use image or snapshot")
	}
	if s.snapshot != "" && s.image != "" {
		errf([]string{"snapshot"}, "both image and snapshot are set", "set one: image builds a Daytona snapshot from a Docker image, snapshot starts from an existing one")
	}
	lim := spec.Limits
	x.d = append(x.d, sandboxplugin.CheckLimits(lim, "the daytona backend", []string{"cpus", "memory", "disk", "output"},
		"Daytona sizes a whole sandbox (cpus, memory, disk); it cannot enforce %s")...)
	if lim.CPUs > 0 {
		s.cpus = int(math.Ceil(lim.CPUs))
		if float64(s.cpus) != lim.CPUs {
			warnf([]string{"limits", "cpus"}, "cpus rounded up", "Daytona allocates whole vCPUs: %g becomes %d", lim.CPUs, s.cpus)
		}
	}
	s.memGiB = ceilGiB(lim.MemoryBytes)
	if lim.MemoryBytes > 0 && int64(s.memGiB)*gib != lim.MemoryBytes {
		warnf([]string{"limits", "memory"}, "memory rounded up", "Daytona allocates whole GiB: %d bytes becomes %d GiB", lim.MemoryBytes, s.memGiB)
	}
	s.diskGiB = ceilGiB(lim.DiskBytes)
	if lim.DiskBytes > 0 && int64(s.diskGiB)*gib != lim.DiskBytes {
		warnf([]string{"limits", "disk"}, "disk rounded up", "Daytona allocates whole GiB: %d bytes becomes %d GiB", lim.DiskBytes, s.diskGiB)
	}
	if s.snapshot != "" {
		for _, r := range []struct {
			name string
			set  bool
		}{{"cpus", s.cpus > 0}, {"memory", s.memGiB > 0}, {"disk", s.diskGiB > 0}} {
			if r.set {
				errf([]string{"limits", r.name}, "resources cannot be set with a snapshot", "a Daytona snapshot fixes cpu, memory and disk; size them when building the snapshot, or use image")
			}
		}
	}
	if s.outputBytes == 0 {
		s.outputBytes = defaultOutputBytes
	}

	// Network: the block's network flag is authoritative; the allow-list
	// narrows an enabled network, network_block_all forbids it.
	switch {
	case s.cfgBlockAll && spec.Network:
		errf([]string{"network_block_all"}, "network_block_all contradicts network = true", "drop one of them")
	case s.allowList != "" && !spec.Network:
		errf([]string{"network_allow_list"}, "network_allow_list needs network = true", "the block disables the network, so there is nothing to allow")
	case s.cfgBlockAll && s.allowList != "":
		errf([]string{"network_allow_list"}, "network_allow_list contradicts network_block_all", "drop one of them")
	}
	s.blockAll = s.cfgBlockAll || !spec.Network

	common, cd := sandboxplugin.CheckCommon(spec)
	x.d = append(x.d, cd...)
	s.workdir, s.env, s.labels = common.Workdir, common.Env, common.Labels

	return s, x.d
}

func ceilGiB(b int64) int {
	if b <= 0 {
		return 0
	}
	return int((b + gib - 1) / gib)
}

func ceilMinutes(d time.Duration) int {
	m := int(math.Ceil(d.Minutes()))
	if m < 1 {
		m = 1
	}
	return m
}
