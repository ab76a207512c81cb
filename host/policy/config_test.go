package policy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
)

func TestConfigDecodesFromHCL(t *testing.T) {
	src := `
policy "recorded" {
  provider = "replay"
  file     = "completions.jsonl"
}
policy "vllm" {
  provider    = "openai"
  base_url    = "http://localhost:8000/v1"
  model       = "Qwen/Qwen2.5-0.5B-Instruct"
  api_key_env = "OPENAI_API_KEY"
  temperature = 0.7
  max_tokens  = 512
  top_p       = 0.95
  stop        = ["</code>"]
  timeout     = "60s"
  max_retries = 8
}
`
	f, diags := hclparse.NewParser().ParseHCL([]byte(src), "run.hcl")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	var root struct {
		Policies []Config `hcl:"policy,block"`
	}
	if diags := gohcl.DecodeBody(f.Body, nil, &root); diags.HasErrors() {
		t.Fatal(diags)
	}
	if len(root.Policies) != 2 {
		t.Fatalf("decoded %d policies", len(root.Policies))
	}
	r, o := root.Policies[0], root.Policies[1]
	if r.Name != "recorded" || r.Provider != "replay" || r.File == nil || *r.File != "completions.jsonl" || r.Model != nil {
		t.Errorf("replay block decoded as %+v", r)
	}
	if o.Name != "vllm" || *o.BaseURL != "http://localhost:8000/v1" || *o.Temperature != 0.7 || *o.MaxTokens != 512 ||
		*o.TopP != 0.95 || *o.Timeout != "60s" || *o.MaxRetries != 8 || o.Stop[0] != "</code>" || o.BackoffBase != nil {
		t.Errorf("openai block decoded as %+v", o)
	}
	if got := r.setAttributes(); len(got) != 1 || got[0] != "file" {
		t.Errorf("replay attributes set: %v", got)
	}
}

func TestNewValidation(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ok.jsonl"), []byte(`{"task_id":"a","completions":["x"]}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("RLHOST_SET_KEY", "")
	openai := func(mut func(*Config)) Config {
		c := Config{Name: "p", Provider: "openai", Model: ptr("m")}
		if mut != nil {
			mut(&c)
		}
		return c
	}
	tests := []struct {
		name    string
		cfg     Config
		wantErr string // "" means success
	}{
		{"replay ok, file relative to base dir", Config{Name: "p", Provider: "replay", File: ptr("ok.jsonl")}, ""},
		{"openai ok", openai(nil), ""},
		{"openai with empty key variable", openai(func(c *Config) { c.APIKeyEnv = ptr("RLHOST_SET_KEY") }), ""},
		{"no provider", Config{Name: "p"}, `policy "p": provider: required`},
		{"unknown provider", Config{Name: "p", Provider: "anthropic"}, `provider: unknown provider "anthropic" (known: openai, replay, rules, vllm)`},
		{"misspelt provider", Config{Name: "p", Provider: "repaly"}, `provider: unknown provider "repaly"; did you mean "replay"? (known: openai, replay, rules, vllm)`},
		{"replay without file", Config{Name: "p", Provider: "replay"}, `file: required`},
		{"replay file missing", Config{Name: "p", Provider: "replay", File: ptr("nope.jsonl")}, `file: open ` + filepath.Join(dir, "nope.jsonl")},
		{"replay with openai attribute", Config{Name: "p", Provider: "replay", File: ptr("ok.jsonl"), Model: ptr("m")}, `model: not used by provider "replay"`},
		{"openai with file", openai(func(c *Config) { c.File = ptr("x") }), `file: not used by provider "openai"`},
		{"openai without model", Config{Name: "p", Provider: "openai"}, `model: required`},
		{"empty base_url", openai(func(c *Config) { c.BaseURL = ptr("") }), `base_url: empty`},
		{"key variable unset: keyless servers need none", openai(func(c *Config) { c.APIKeyEnv = ptr("RLHOST_SURELY_UNSET_VAR") }), ""},
		{"bad timeout", openai(func(c *Config) { c.Timeout = ptr("soon") }), `timeout: invalid duration "soon" (not a duration)`},
		{"zero timeout", openai(func(c *Config) { c.Timeout = ptr("0s") }), `timeout: invalid duration "0s" (must be more than zero)`},
		{"negative retries", openai(func(c *Config) { c.MaxRetries = ptr(-1) }), `max_retries: -1`},
		{"temperature too high", openai(func(c *Config) { c.Temperature = ptr(2.5) }), `temperature: 2.5 is outside [0, 2]`},
		{"top_p zero", openai(func(c *Config) { c.TopP = ptr(0.0) }), `top_p: 0 is outside (0, 1]`},
		{"max_tokens zero", openai(func(c *Config) { c.MaxTokens = ptr(0) }), `max_tokens: 0, want >= 1`},
		{"backoff max below base", openai(func(c *Config) { c.BackoffBase, c.BackoffMax = ptr("2s"), ptr("1s") }), `backoff_max: 1s is below backoff_base (2s)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(tc.cfg, dir)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				p.Close()
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want it to contain %q", err, tc.wantErr)
			}
			// The attribute is machine-readable too, for diagnostics with ranges.
			ds := schema.FromError(err)
			if len(ds) != 1 || len(ds[0].Path) != 1 || !strings.Contains(tc.wantErr, ds[0].Path[0]+": ") {
				t.Fatalf("error %#v does not carry the attribute in %q", err, tc.wantErr)
			}
		})
	}
}

// echoPolicy stands in for a provider added from outside, e.g. the trainer's.
type echoPolicy struct{ name string }

func (e echoPolicy) Complete(_ context.Context, req Request) (Response, error) {
	return Response{Choices: []Choice{{Message: core.Message{Role: core.RoleAssistant, Content: e.name}}}}, nil
}
func (echoPolicy) Close() error { return nil }

func TestWithProvider(t *testing.T) {
	errNoModel := errors.New("no checkpoint")
	embedded := func(cfg Config, baseDir string) (Policy, error) {
		if cfg.Model == nil {
			return nil, errNoModel
		}
		return echoPolicy{name: *cfg.Model + "@" + baseDir}, nil
	}
	p, err := New(Config{Name: "p", Provider: "embedded", Model: ptr("ckpt")}, "/runs", WithProvider("embedded", embedded))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := p.Complete(context.Background(), Request{})
	if err != nil || resp.Choices[0].Message.Content != "ckpt@/runs" {
		t.Fatalf("got %+v, %v", resp, err)
	}
	if _, err := New(Config{Name: "p", Provider: "embedded"}, "", WithProvider("embedded", embedded)); !errors.Is(err, errNoModel) {
		t.Fatalf("factory error lost: %v", err)
	}
	// Without the option the provider is unknown: no global registry.
	if _, err := New(Config{Name: "p", Provider: "embedded"}, ""); err == nil {
		t.Fatal("provider registered globally")
	}
}
