package aviato

import (
	"fmt"
	"math"
	"net/url"
	"strconv"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/duration"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/core/sdk/sandboxplugin"
)

// Defaults of the backend settings, and the names the official client uses.
const (
	defaultBaseURL      = "https://atc.cw-sandbox.com" // the client's DEFAULT_BASE_URL (v0.16.0)
	defaultImage        = "python:3.11"                // the client's DEFAULT_CONTAINER_IMAGE
	defaultAPITimeout   = 30 * time.Second
	defaultStartTimeout = 5 * time.Minute
	defaultLifetime     = time.Hour // max lifetime when the block sets no ttl
	defaultOutputBytes  = 1 << 20
	defaultReadBytes    = 16 << 20
	defaultMaxStarting  = 8
	defaultCreateRate   = 4.0
	defaultMaxRetries   = 4
	apiKeyEnv           = "CWSANDBOX_API_KEY"
	legacyAPIKeyEnv     = "AVIATO_API_KEY"
	baseURLEnv          = "CWSANDBOX_BASE_URL"
	wandbKeyEnv         = "WANDB_API_KEY"
	wandbEntityEnv      = "WANDB_ENTITY_NAME"
	wandbProjectEnv     = "WANDB_PROJECT_NAME"
	backendName         = "aviato"
	backendVersion      = "0.1.0"
	isolationCloud      = "cloud"
)

// Config is the aviato-specific part of a `sandbox` block.
type Config struct {
	APIKey       string  `json:"api_key"`
	APIURL       string  `json:"api_url"`
	WandbEntity  string  `json:"wandb_entity"`
	MaxStarting  int     `json:"max_starting"`
	CreateRate   float64 `json:"create_rate"`
	APITimeout   string  `json:"api_timeout"`
	StartTimeout string  `json:"start_timeout"`
	MaxRetries   int     `json:"max_retries"`
	StateDir     string  `json:"state_dir"`
}

func configSpec() schema.Spec {
	key := schema.String("api_key", "API key; empty reads $"+apiKeyEnv+", then $"+legacyAPIKeyEnv+", then W&B credentials. Never logged.").WithDefault("").MarkSensitive()
	return schema.Spec{Attributes: []schema.Attribute{
		key,
		schema.String("api_url", "service URL (http:// or https://, no path); empty reads $"+baseURLEnv+", else "+defaultBaseURL).WithDefault(""),
		schema.String("wandb_entity", "W&B entity for W&B credentials; empty reads $"+wandbEntityEnv).WithDefault(""),
		schema.Number("max_starting", "most sandboxes being started at once").WithDefault(defaultMaxStarting),
		schema.Number("create_rate", "most Start calls per second").WithDefault(defaultCreateRate),
		schema.String("api_timeout", "timeout of each API call attempt (not of exec)").WithDefault("30s"),
		schema.String("start_timeout", "how long Create waits for a sandbox to be RUNNING").WithDefault("5m"),
		schema.Number("max_retries", "retries of a call the service answered UNAVAILABLE or RESOURCE_EXHAUSTED").WithDefault(defaultMaxRetries),
		schema.String("state_dir", "where the per-user record of owners is kept; empty = $XDG_STATE_HOME/rlhost/aviato").WithDefault(""),
	}}
}

// settings is a validated Config plus the block's sandbox spec.
type settings struct {
	auth                     []string // gRPC metadata pairs; sensitive
	target                   string   // host:port
	secure                   bool
	baseURL                  string
	image                    string
	env                      map[string]string
	labels                   map[string]string
	cpu, memory              string
	lifetime                 int32 // seconds
	egress                   string
	maxStarting              int
	createRate               float64
	apiTimeout, startTimeout time.Duration
	outputBytes              int64
	maxRetries               int
	stateDir, workdir, runID string
}

type diagnoser struct{ d schema.Diagnostics }

func (x *diagnoser) errf(p []string, summary, detail string, args ...any) {
	x.d = append(x.d, schema.Errorf(p, summary, detail, args...))
}

// validate turns the block into settings. Whatever Aviato cannot honour is
// an error whose Path names the attribute.
func validate(c Config, spec core.SandboxSpec, runID string, getenv func(string) string) (settings, schema.Diagnostics) {
	x := &diagnoser{}
	s := settings{maxStarting: c.MaxStarting, createRate: c.CreateRate, maxRetries: c.MaxRetries, stateDir: c.StateDir, runID: runID}

	// Credentials, in the client's order; the W&B headers are those of
	// aviato-client's W&B mode.
	key := c.APIKey
	for _, k := range []string{apiKeyEnv, legacyAPIKeyEnv} {
		if key == "" {
			key = getenv(k)
		}
	}
	switch {
	case key != "":
		s.auth = []string{"authorization", "Bearer " + key}
	case getenv(wandbKeyEnv) != "":
		entity := c.WandbEntity
		if entity == "" {
			entity = getenv(wandbEntityEnv)
		}
		if entity == "" {
			x.errf([]string{"wandb_entity"}, "W&B credentials need an entity", "set %s or wandb_entity", wandbEntityEnv)
		}
		s.auth = []string{"x-api-key", getenv(wandbKeyEnv), "x-entity-id", entity}
		if p := getenv(wandbProjectEnv); p != "" {
			s.auth = append(s.auth, "x-project-name", p)
		}
	default:
		x.errf([]string{"api_key"}, "no Aviato credentials", "set %s (or %s, or %s with %s) in the environment, or api_key in the sandbox block", apiKeyEnv, legacyAPIKeyEnv, wandbKeyEnv, wandbEntityEnv)
	}

	s.baseURL = c.APIURL
	if s.baseURL == "" {
		s.baseURL = getenv(baseURLEnv)
	}
	if s.baseURL == "" {
		s.baseURL = defaultBaseURL
	}
	target, secure, err := grpcTarget(s.baseURL)
	if err != nil {
		x.errf([]string{"api_url"}, "invalid api_url", "%v", err)
	}
	s.target, s.secure = target, secure

	dur := func(name, v string, def time.Duration) time.Duration {
		d, err := duration.PositiveOr(v, def)
		if err != nil {
			x.errf([]string{name}, "invalid duration", "%v", err)
			return def
		}
		return d
	}
	s.apiTimeout = dur("api_timeout", c.APITimeout, defaultAPITimeout)
	s.startTimeout = dur("start_timeout", c.StartTimeout, defaultStartTimeout)
	if s.maxStarting == 0 {
		s.maxStarting = defaultMaxStarting
	}
	if s.maxStarting < 0 {
		x.errf([]string{"max_starting"}, "invalid max_starting", "want a positive number")
	}
	if s.createRate == 0 {
		s.createRate = defaultCreateRate
	}
	if s.createRate < 0 || math.IsInf(s.createRate, 0) || math.IsNaN(s.createRate) {
		x.errf([]string{"create_rate"}, "invalid create_rate", "want a positive number of creates per second")
	}
	if s.maxRetries < 0 {
		x.errf([]string{"max_retries"}, "invalid max_retries", "want 0 or more")
	}
	return s.withSpec(spec, x)
}

// withSpec maps the block's common settings onto StartSandboxRequest fields.
func (s settings) withSpec(spec core.SandboxSpec, x *diagnoser) (settings, schema.Diagnostics) {
	if spec.Rootfs != "" {
		x.errf([]string{"rootfs"}, "rootfs is not supported by the aviato backend", "Aviato sandboxes start from a container image; use image")
	}
	s.image = spec.Image
	if s.image == "" {
		s.image = defaultImage
	}
	lim := spec.Limits
	x.d = append(x.d, sandboxplugin.CheckLimits(lim, "the aviato backend", []string{"cpus", "memory", "output"},
		"Aviato's StartSandboxRequest sizes a sandbox by cpu and memory only; it has no field for %s")...)
	if lim.CPUs > 0 {
		s.cpu = cpuQuantity(lim.CPUs)
	}
	if lim.MemoryBytes > 0 {
		s.memory = memQuantity(lim.MemoryBytes)
	}
	s.outputBytes = lim.OutputBytes
	if s.outputBytes == 0 {
		s.outputBytes = defaultOutputBytes
	}
	ttl := spec.TTL
	if ttl == 0 {
		ttl = defaultLifetime
	}
	secs := math.Ceil(ttl.Seconds())
	if secs > math.MaxInt32 {
		x.errf([]string{"ttl"}, "ttl too long", "Aviato takes max_lifetime_seconds as a 32-bit number of seconds")
	}
	s.lifetime = int32(min(secs, math.MaxInt32))
	// The service's egress types include NONE and INTERNET.
	s.egress = "none"
	if spec.Network {
		s.egress = "internet"
	}
	common, cd := sandboxplugin.CheckCommon(spec)
	x.d = append(x.d, cd...)
	s.workdir, s.env, s.labels = common.Workdir, common.Env, common.Labels
	return s, x.d
}

// cpuQuantity writes cpus as Kubernetes millicores ("500m") or whole cores.
func cpuQuantity(cpus float64) string {
	m := int64(math.Ceil(cpus * 1000))
	if m%1000 == 0 {
		return strconv.FormatInt(m/1000, 10)
	}
	return strconv.FormatInt(m, 10) + "m"
}

// memQuantity writes bytes in the largest binary unit that divides them.
func memQuantity(b int64) string {
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
		if b%u.size == 0 {
			return strconv.FormatInt(b/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(b, 10)
}

// grpcTarget reads a base URL the way the client does: http or https, a
// host, an optional port, no path.
func grpcTarget(base string) (string, bool, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", false, fmt.Errorf("%q: %v", base, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", false, fmt.Errorf("%q: want an http:// or https:// URL", base)
	}
	if u.Path != "" && u.Path != "/" {
		return "", false, fmt.Errorf("%q: gRPC endpoints take no path", base)
	}
	if u.Hostname() == "" {
		return "", false, fmt.Errorf("%q has no host", base)
	}
	secure := u.Scheme == "https"
	port := u.Port()
	if port == "" {
		port = "80"
		if secure {
			port = "443"
		}
	}
	return u.Hostname() + ":" + port, secure, nil
}
