package policy

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/rlhost/rlhost/core/duration"
	"github.com/rlhost/rlhost/core/schema"
)

// Config is one `policy "name" { ... }` block, decodable with gohcl.
// Optional attributes are pointers (nil when absent); durations are strings
// read by core/duration. Each provider rejects attributes it
// does not use, so a typo in the provider name does not silently drop them.
type Config struct {
	Name     string `hcl:"name,label"`
	Provider string `hcl:"provider"`

	// replay, rules
	File *string `hcl:"file,optional"` // JSONL, relative to the config file

	// openai
	BaseURL     *string  `hcl:"base_url,optional"`    // default https://api.openai.com/v1
	BaseURLs    []string `hcl:"base_urls,optional"`   // several servers of one model (vLLM replicas)
	Model       *string  `hcl:"model,optional"`       // required
	APIKeyEnv   *string  `hcl:"api_key_env,optional"` // env var holding the key; absent: no key
	Temperature *float64 `hcl:"temperature,optional"` // 0..2; server default when absent
	TopP        *float64 `hcl:"top_p,optional"`       // (0, 1]
	MaxTokens   *int     `hcl:"max_tokens,optional"`  // sent as max_tokens
	Stop        []string `hcl:"stop,optional"`
	Timeout     *string  `hcl:"timeout,optional"`      // per attempt; default 300s
	MaxRetries  *int     `hcl:"max_retries,optional"`  // default 8
	BackoffBase *string  `hcl:"backoff_base,optional"` // first retry's backoff ceiling; default 500ms
	BackoffMax  *string  `hcl:"backoff_max,optional"`  // largest backoff ceiling; default 30s
	// ReturnTokenIDs asks the server for the prompt's and the sampled
	// tokens' ids and log-probs (vLLM's return_token_ids extension), which
	// training needs.
	ReturnTokenIDs *bool `hcl:"return_token_ids,optional"`

	// embedded (the trainer's own server): model is a Hugging Face model
	// directory; or init names a preset for a fresh random model with the
	// tokenizer file given, seeded by init_seed.
	Init      *string `hcl:"init,optional"`
	Tokenizer *string `hcl:"tokenizer,optional"`
	InitSeed  *int    `hcl:"init_seed,optional"`
	MaxBatch  *int    `hcl:"max_batch,optional"` // sequences generated at once; default 16
}

func (c Config) label() string {
	return fmt.Sprintf("policy %q", c.Name)
}

// attrErr is New refusing attribute attr of c. The error carries a
// schema.Diagnostic with the attribute's path (schema.FromError recovers
// it), so a caller holding the HCL body points at that attribute's range;
// attr "" blames the block as a whole.
func (c Config) attrErr(attr, format string, args ...any) error {
	var path []string
	if attr != "" {
		path = []string{attr}
	}
	return fmt.Errorf("policy %q: %w", c.Name, schema.Diagnostics{schema.Errorf(path, "", format, args...)}.Err())
}

// AttributeError is attrErr for providers registered from outside this
// package (WithProvider), so their errors are placed the same way.
func (c Config) AttributeError(attr, format string, args ...any) error {
	return c.attrErr(attr, format, args...)
}

// setAttributes names the optional attributes present in c, from its hcl tags.
func (c Config) setAttributes() []string {
	var names []string
	v := reflect.ValueOf(c)
	t := v.Type()
	for i := range t.NumField() {
		name, opt, _ := strings.Cut(t.Field(i).Tag.Get("hcl"), ",")
		if opt != "optional" {
			continue
		}
		if f := v.Field(i); !f.IsZero() {
			names = append(names, name)
		}
	}
	return names
}

// rejectUnused fails when c sets an optional attribute that provider does
// not read.
func (c Config) rejectUnused(used ...string) error {
	for _, name := range c.setAttributes() {
		if !slices.Contains(used, name) {
			return c.attrErr(name, "not used by provider %q", c.Provider)
		}
	}
	return nil
}

// readFile reads the file attribute of a provider that takes only a file
// (replay, rules): required, relative to the job file's directory.
func (c Config) readFile(baseDir string) (path string, data []byte, err error) {
	if err := c.rejectUnused("file"); err != nil {
		return "", nil, err
	}
	if c.File == nil || *c.File == "" {
		return "", nil, c.attrErr("file", "required for provider %q", c.Provider)
	}
	path = *c.File
	if !filepath.IsAbs(path) {
		path = filepath.Join(baseDir, path)
	}
	data, err = os.ReadFile(path)
	if err != nil {
		return "", nil, c.attrErr("file", "%w", err)
	}
	return path, data, nil
}

// duration parses an optional duration attribute, which must be positive.
func (c Config) duration(attr string, v *string, def time.Duration) (time.Duration, error) {
	if v == nil {
		return def, nil
	}
	d, err := duration.Positive(*v)
	if err != nil {
		return 0, c.attrErr(attr, "%w", err)
	}
	return d, nil
}
