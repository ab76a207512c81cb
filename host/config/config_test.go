package config

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"

	"github.com/rlhost/rlhost/core/schema"
)

const good = `
variable "backend" { default = "local" }
variable "steps" { default = 3 }
run {
  name = "demo"
  steps = var.steps
  batch_size = 2
  group_size = 5
  seed = 7
  concurrency = 8
  max_turns = 4
  episode_timeout = "2m"
}
sandbox "local" {
  backend = var.backend
  timeout = "1s"
  labels = { team = "rl" }
  env = { FOO = "bar" }
  ttl = "1h"
  limits {
    memory = "512MiB"
    cpu_time = "10s"
    pids = 64
    output = "1MiB"
  }
  isolation = "none"
}
env "coding" {
  sandbox = sandbox.local
  tasks = "builtin"
}
policy "replay" {
  provider = "replay"
  file = "c.jsonl"
}
output { dir = "runs/${run.name}-x" }
`

func TestParseGood(t *testing.T) {
	f, diags := Parse("/tmp/jobs/good.hcl", []byte(good), map[string]string{"steps": "5"})
	if diags.HasErrors() {
		t.Fatalf("unexpected diagnostics: %v", diags)
	}
	r := f.Run
	if r.Name != "demo" || r.Steps != 5 || r.BatchSize != 2 || r.GroupSize != 5 || r.Seed != 7 || r.Concurrency != 8 || r.MaxTurns != 4 || r.EpisodeTimeout != 2*time.Minute {
		t.Errorf("run = %+v", r)
	}
	if r.Env != "coding" || r.Policy != "replay" {
		t.Errorf("defaults for env/policy: %q %q", r.Env, r.Policy)
	}
	sb := f.Sandbox("local")
	if sb == nil || sb.Backend != "local" || sb.ExecTimeout != time.Second || sb.Spec.TTL != time.Hour {
		t.Fatalf("sandbox = %+v", sb)
	}
	if sb.Spec.Limits.MemoryBytes != 512<<20 || sb.Spec.Limits.Pids != 64 || sb.Spec.Limits.CPUTime != 10*time.Second || sb.Spec.Limits.OutputBytes != 1<<20 {
		t.Errorf("limits = %+v", sb.Spec.Limits)
	}
	if sb.Spec.Labels["team"] != "rl" || sb.Spec.Env["FOO"] != "bar" {
		t.Errorf("labels/env = %v %v", sb.Spec.Labels, sb.Spec.Env)
	}
	if e := f.Env(); e == nil || e.Plugin != "coding" || e.Sandbox != "local" {
		t.Errorf("env = %+v", e)
	}
	if f.Output.Dir != "runs/demo-x" {
		t.Errorf("output dir = %q", f.Output.Dir)
	}
	if f.Dir != "/tmp/jobs" {
		t.Errorf("dir = %q", f.Dir)
	}
	// The plugin-owned remainder decodes against a plugin schema.
	spec := schema.Spec{Attributes: []schema.Attribute{
		{Name: "isolation", Type: cty.String, Default: schema.DefaultJSON("namespaces")},
		{Name: "pool_size", Type: cty.Number, Default: schema.DefaultJSON(0)},
	}}
	js, d := DecodePluginBody(sb.Body, spec, f.EvalContext, "local")
	if d.HasErrors() {
		t.Fatalf("decode plugin body: %v", d)
	}
	var got map[string]any
	if err := json.Unmarshal(js, &got); err != nil {
		t.Fatal(err)
	}
	if got["isolation"] != "none" || got["pool_size"] != float64(0) {
		t.Errorf("plugin config = %s", js)
	}
}

// Each bad input must give an error diagnostic that points at the right
// line and column, never a panic.
func TestDiagnostics(t *testing.T) {
	cases := []struct {
		name     string
		src      string
		vars     map[string]string
		summary  string // substring of the first error's summary or detail
		line     int
		col      int
		noSubjOK bool
	}{
		{name: "syntax", src: "run {\n  steps = \n}\n", summary: "Invalid expression", line: 2, col: 11},
		{name: "unclosed", src: "run {\n  steps = 1\n", summary: "Unclosed configuration block", line: 1, col: 5},
		{name: "unknown top block", src: "rnu {}\n", summary: "Unsupported block type", line: 1, col: 1},
		{name: "unknown run attr", src: "run {\n  stpes = 3\n}\n", summary: `Did you mean "steps"?`, line: 2, col: 3},
		{name: "unknown output attr", src: "output {\n  dri = \"x\"\n}\n", summary: `Did you mean "dir"?`, line: 2, col: 3},
		{name: "wrong type", src: "run {\n  steps = \"many\"\n}\n", summary: "Unsuitable value type", line: 2, col: 12},
		{name: "negative steps", src: "run {\n  steps = 0\n}\n", summary: "steps must be at least 1", line: 2, col: 11},
		{name: "bad duration", src: "run {\n  episode_timeout = \"soon\"\n}\n", summary: "invalid duration", line: 2, col: 21},
		{name: "bad size", src: "sandbox \"s\" {\n  backend = \"local\"\n  limits {\n    memory = \"lots\"\n  }\n}\n", summary: "invalid size", line: 4, col: 14},
		{name: "unknown limit", src: "sandbox \"s\" {\n  backend = \"local\"\n  limits {\n    memroy = \"1G\"\n  }\n}\n", summary: `Did you mean "memory"?`, line: 4, col: 5},
		{name: "no backend", src: "sandbox \"s\" {\n}\n", summary: "Missing backend", line: 1, col: 1},
		{name: "unknown sandbox ref", src: "sandbox \"a\" { backend = \"local\" }\nenv \"e\" {\n  sandbox = sandbox.b\n}\n", summary: "Unsupported attribute", line: 3, col: 20},
		{name: "undeclared var use", src: "run {\n  name = var.nope\n}\n", summary: "Unsupported attribute", line: 2, col: 13},
		{name: "undeclared --var", src: "run {}\n", vars: map[string]string{"x": "1"}, summary: "Undeclared variable", noSubjOK: true},
		{name: "var type", src: "variable \"n\" { default = 3 }\nrun { steps = var.n }\n", vars: map[string]string{"n": "three"}, summary: "Invalid value for variable", line: 1, col: 1},
		{name: "required var", src: "variable \"n\" {}\n", summary: "No value for required variable", line: 1, col: 1},
		{name: "duplicate sandbox", src: "sandbox \"a\" { backend = \"local\" }\nsandbox \"a\" { backend = \"local\" }\n", summary: "Duplicate sandbox block", line: 2, col: 1},
		{name: "reserved label", src: "sandbox \"a\" {\n  backend = \"local\"\n  labels = { \"rlhost.run\" = \"x\" }\n}\n", summary: "Reserved label", line: 3, col: 12},
		{name: "ambiguous env", src: "sandbox \"a\" { backend = \"local\" }\nenv \"x\" {}\nenv \"y\" {}\nrun {}\n", summary: "Ambiguous env", line: 4, col: 1},
		{name: "ambiguous env without run", src: "sandbox \"a\" { backend = \"local\" }\nenv \"x\" {}\nenv \"y\" {}\n", summary: "Ambiguous env", line: 3, col: 1},
		{name: "unknown run env", src: "env \"x\" {}\nrun {\n  env = \"nope\"\n}\n", summary: `no env block has that name; the names are "x".`, line: 3, col: 9},
		{name: "misspelt run policy", src: "policy \"replay\" { provider = \"replay\" }\npolicy \"openai\" { provider = \"openai\" }\nrun {\n  policy = \"replya\"\n}\n", summary: `no policy block has that name; did you mean "replay"?`, line: 4, col: 12},
		{name: "misspelt --var", src: "variable \"policy\" { default = \"a\" }\nvariable \"model\" { default = \"\" }\nrun {}\n", vars: map[string]string{"polcy": "b"}, summary: "Did you mean --var policy?", noSubjOK: true},
		{name: "unknown --var", src: "variable \"policy\" { default = \"a\" }\nrun {}\n", vars: map[string]string{"xyz": "b"}, summary: "The variables it declares: policy.", noSubjOK: true},
		{name: "policy without provider", src: "policy \"p\" {\n  file = \"x\"\n}\n", summary: "Missing required argument", line: 1, col: 12},
		{name: "zero exec timeout", src: "sandbox \"s\" {\n  backend = \"local\"\n  timeout = \"0s\"\n}\n", summary: "must be more than zero", line: 3, col: 13},
		{name: "removed exec_timeout", src: "sandbox \"s\" {\n  backend = \"local\"\n  exec_timeout = \"45s\"\n}\n", summary: `write timeout = "45s" instead`, line: 3, col: 3},
		{name: "bad run name", src: "run {\n  name = \"a b\"\n}\n", summary: "Invalid run name", line: 2, col: 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, diags := Parse("job.hcl", []byte(tc.src), tc.vars)
			if !diags.HasErrors() {
				t.Fatalf("expected an error, got none")
			}
			d := firstError(diags)
			if !strings.Contains(d.Summary+" "+d.Detail, tc.summary) {
				t.Fatalf("first error = %q / %q; want it to mention %q (all: %v)", d.Summary, d.Detail, tc.summary, diags)
			}
			if d.Subject == nil {
				if !tc.noSubjOK {
					t.Fatalf("error %q has no source range", d.Summary)
				}
				return
			}
			if d.Subject.Filename != "job.hcl" || d.Subject.Start.Line != tc.line || d.Subject.Start.Column != tc.col {
				t.Errorf("error %q at %s:%d:%d, want job.hcl:%d:%d", d.Summary, d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column, tc.line, tc.col)
			}
		})
	}
}

func firstError(diags hcl.Diagnostics) *hcl.Diagnostic {
	for _, d := range diags {
		if d.Severity == hcl.DiagError {
			return d
		}
	}
	return nil
}

func TestPluginBodyDiagnostics(t *testing.T) {
	src := "sandbox \"s\" {\n  backend = \"local\"\n  image = \"ubuntu\"\n  pool_size = \"many\"\n  typo = 1\n}\n"
	f, diags := Parse("job.hcl", []byte(src), nil)
	if diags.HasErrors() {
		t.Fatalf("parse: %v", diags)
	}
	sb := f.Sandbox("s")
	spec := schema.Spec{Attributes: []schema.Attribute{{Name: "pool_size", Type: cty.Number}}}
	_, d := DecodePluginBody(sb.Body, spec, f.EvalContext, "local")
	if !d.HasErrors() {
		t.Fatal("want errors for a wrong type and an unknown attribute")
	}
	var sawType, sawTypo bool
	for _, x := range d {
		if x.Subject == nil {
			t.Errorf("diagnostic without range: %v", x)
			continue
		}
		if x.Subject.Start.Line == 4 {
			sawType = true
		}
		if x.Subject.Start.Line == 5 && strings.Contains(x.Summary, "Unsupported argument") {
			sawTypo = true
		}
	}
	if !sawType || !sawTypo {
		t.Errorf("diagnostics %v: want line 4 (type) and line 5 (unsupported)", d)
	}
	// A plugin rejecting a host-decoded attribute points at that attribute.
	pd := PluginDiagnostics(schema.Diagnostics{schema.Errorf([]string{"image"}, "Unsupported setting", "images need the daytona backend")}, schema.Spec{}, "local", sb.Body, sb.AttrRanges, sb.DefRange)
	if len(pd) != 1 || pd[0].Subject.Start.Line != 3 || pd[0].Subject.Start.Column != 11 {
		t.Fatalf("plugin diagnostic = %+v", pd[0].Subject)
	}
	// Limits are named by core.Limits' JSON fields in backend diagnostics.
	src2 := "sandbox \"s\" {\n  backend = \"daytona\"\n  limits {\n    cpus = 2\n    pids = 10\n  }\n}\n"
	f2, _ := Parse("job.hcl", []byte(src2), nil)
	sb2 := f2.Sandbox("s")
	pd = PluginDiagnostics(schema.Diagnostics{schema.Errorf([]string{"limits", "pids"}, "Unsupported limit", "")}, schema.Spec{}, "daytona", sb2.Body, sb2.AttrRanges, sb2.DefRange)
	if pd[0].Subject.Start.Line != 5 {
		t.Fatalf("limit diagnostic at line %d, want 5", pd[0].Subject.Start.Line)
	}
}

func TestSpecForDefaultsAndBlocks(t *testing.T) {
	spec := schema.Spec{
		Attributes: []schema.Attribute{{Name: "n", Type: cty.Number, Default: schema.DefaultJSON(3)}},
		Blocks: []schema.Block{{Name: "task", Nesting: schema.NestingList, Spec: schema.Spec{Attributes: []schema.Attribute{
			{Name: "id", Type: cty.String, Required: true},
		}}}},
	}
	src := "env \"e\" {\n  task { id = \"a\" }\n  task { id = \"b\" }\n}\n"
	f, diags := Parse("job.hcl", []byte(src), nil)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	js, d := DecodePluginBody(f.Envs[0].Body, spec, f.EvalContext, "e")
	if d.HasErrors() {
		t.Fatal(d)
	}
	if string(js) != `{"n":3,"task":[{"id":"a"},{"id":"b"}]}` {
		t.Errorf("decoded %s", js)
	}
	// A schema whose default does not match its type is a plugin bug, reported as such.
	bad := schema.Spec{Attributes: []schema.Attribute{{Name: "n", Type: cty.Number, Default: schema.DefaultJSON("x")}}}
	if _, d := DecodePluginBody(f.Envs[0].Body, bad, f.EvalContext, "e"); !d.HasErrors() || !strings.Contains(d[0].Summary, "Invalid plugin schema") {
		t.Errorf("broken schema not reported: %v", d)
	}
}

func TestRunNameFromFile(t *testing.T) {
	f, diags := Parse("/tmp/my job (v2).hcl", []byte("env \"e\" {}\n"), nil)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if f.Run.Name != "my-job--v2-" || f.Output.Dir != "runs/my-job--v2-" {
		t.Errorf("name %q dir %q", f.Run.Name, f.Output.Dir)
	}
}

func TestEnvFunction(t *testing.T) {
	t.Setenv("RLHOST_TEST_VALUE", "hello")
	src := "run {\n  name = env(\"RLHOST_TEST_VALUE\")\n}\noutput {\n  dir = env(\"RLHOST_TEST_UNSET_X\", \"fallback\")\n}\n"
	f, diags := Parse("job.hcl", []byte(src), nil)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if f.Run.Name != "hello" || f.Output.Dir != "fallback" {
		t.Errorf("got name %q dir %q", f.Run.Name, f.Output.Dir)
	}
}

func TestUnits(t *testing.T) {
	sizes := map[string]int64{"1024": 1024, "1KiB": 1024, "1.5MiB": 3 << 19, "2GB": 2e9, "64M": 64 << 20, "0": 0}
	for in, want := range sizes {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "-1", "lots", "1XB", "1e30GiB", "NaN", "inf", "+Inf MiB"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) accepted", bad)
		}
	}
}

// FuzzParse feeds arbitrary bytes to the loader: it must never panic, and
// every error it reports must carry a summary.
func FuzzParse(f *testing.F) {
	f.Add([]byte(good))
	f.Add([]byte("run {\n  steps = \n}\n"))
	f.Add([]byte("sandbox \"s\" { limits { memory = \"1G\" } }"))
	f.Add([]byte("variable \"x\" {}\nrun { name = var.x }"))
	f.Add([]byte("env \"e\" { sandbox = sandbox.nope }"))
	f.Add([]byte("${{{"))
	f.Fuzz(func(t *testing.T, src []byte) {
		_, diags := Parse("fuzz.hcl", src, map[string]string{"x": "1"})
		for _, d := range diags {
			if d.Summary == "" {
				t.Fatalf("diagnostic without summary: %#v", d)
			}
		}
	})
}

func TestPluginDiagnosticsIndexedBlocks(t *testing.T) {
	src := "env \"e\" {\n  task {\n    id = \"a\"\n  }\n  task {\n    id = \"b\"\n  }\n}\n"
	f, diags := Parse("job.hcl", []byte(src), nil)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	e := f.Envs[0]
	cases := []struct {
		path []string
		line int
	}{
		{[]string{"task", "1", "id"}, 6},
		{[]string{"task", "0", "id"}, 3},
		{[]string{"task", "1"}, 5},
		{[]string{"task", "id"}, 3},
		{[]string{"task", "7", "id"}, 1}, // out of range: the whole block
	}
	for _, tc := range cases {
		pd := PluginDiagnostics(schema.Diagnostics{schema.Errorf(tc.path, "bad", "")}, schema.Spec{}, "e", e.Body, e.AttrRanges, e.DefRange)
		if got := pd[0].Subject.Start.Line; got != tc.line {
			t.Errorf("path %v points at line %d, want %d", tc.path, got, tc.line)
		}
	}
}

func TestSensitiveDiagnosticsHideTheLine(t *testing.T) {
	src := "sandbox \"s\" {\n  backend = \"daytona\"\n  api_key = \"sk-secret-value\"\n}\n"
	f, diags := Parse("job.hcl", []byte(src), nil)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	sb := f.Sandboxes[0]
	spec := schema.Spec{Attributes: []schema.Attribute{{Name: "api_key", Type: cty.String, Sensitive: true}}}
	pd := PluginDiagnostics(schema.Diagnostics{schema.Errorf([]string{"api_key"}, "Authentication failed", "the key was refused")}, spec, "daytona", sb.Body, sb.AttrRanges, sb.DefRange)
	if pd[0].Subject != nil {
		t.Fatal("a diagnostic about a sensitive attribute must not carry a source range to echo")
	}
	if !strings.Contains(pd[0].Detail, "job.hcl:3:13") || strings.Contains(pd[0].Detail, "sk-secret") {
		t.Fatalf("detail = %q", pd[0].Detail)
	}
	// A sensitive setting the block leaves out has no value to hide: the
	// diagnostic is placed (here on the block) and says nothing of one.
	f, diags = Parse("job.hcl", []byte("sandbox \"s\" {\n  backend = \"daytona\"\n}\n"), nil)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	sb = f.Sandboxes[0]
	pd = PluginDiagnostics(schema.Diagnostics{schema.Errorf([]string{"api_key"}, "no key", "set DAYTONA_API_KEY or api_key")}, spec, "daytona", sb.Body, nil, sb.AttrRanges["backend"])
	if pd[0].Subject == nil || pd[0].Subject.Start.Line != 2 || strings.Contains(pd[0].Detail, "sensitive") {
		t.Fatalf("missing sensitive setting: subject %v, detail %q", pd[0].Subject, pd[0].Detail)
	}
	if err := CheckReserved(schema.Spec{Attributes: []schema.Attribute{{Name: "labels", Type: cty.String}}}, ReservedSandboxSettings, "p"); err == nil {
		t.Error("a plugin declaring labels must be refused")
	}
}

// The unit parsers either fail or return a sane, non-negative value.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"1GiB", "0", "1.5MiB", "NaN", "1e308", "-0", " 7 KB "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if v, err := ParseSize(s); err == nil && (v < 0 || v > 1<<62) {
			t.Fatalf("ParseSize(%q) = %d", s, v)
		}
	})
}

// schema.Spec.Complete (what test harnesses give a plugin) must produce the
// same object as the host's decoding of the equivalent HCL block.
func TestCompleteMatchesHostDecoding(t *testing.T) {
	spec := schema.Spec{
		Attributes: []schema.Attribute{
			schema.StringList("words", "").WithDefault([]string{"hello"}),
			schema.Number("max_turns", "").WithDefault(3),
			schema.String("key", ""),
			schema.Bool("strict", "").MarkRequired(),
		},
		Blocks: []schema.Block{
			schema.SingleBlock("grader", "", schema.Spec{Attributes: []schema.Attribute{schema.String("cmd", "").WithDefault("pytest")}}),
			schema.SingleBlock("extra", "", schema.Spec{Attributes: []schema.Attribute{schema.String("x", "")}}),
			schema.ListBlock("tool", "", schema.Spec{Attributes: []schema.Attribute{schema.String("name", "").MarkRequired(), schema.Number("timeout", "").WithDefault(5)}}),
			schema.ListBlock("none", "", schema.Spec{Attributes: []schema.Attribute{schema.String("y", "")}}),
		},
	}
	src := "env \"e\" {\n  strict = true\n  max_turns = 7\n  grader {}\n  tool {\n    name = \"sh\"\n  }\n}\n"
	f, diags := Parse("job.hcl", []byte(src), nil)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	host, diags := DecodePluginBody(f.Envs[0].Body, spec, f.EvalContext, "test")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	harness, err := spec.Complete([]byte(`{"strict": true, "max_turns": 7, "grader": {}, "tool": [{"name": "sh"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var h, g any
	json.Unmarshal(host, &h)
	json.Unmarshal(harness, &g)
	if !reflect.DeepEqual(h, g) {
		t.Errorf("host decoded %s\nharness gave %s", host, harness)
	}
}

func TestSandboxFor(t *testing.T) {
	for _, tc := range []struct {
		name, src   string
		needs       bool
		want        string // sandbox block name, "" for none
		severity    hcl.DiagnosticSeverity
		diagSummary string
	}{
		{name: "env without sandbox needs none", src: "env \"e\" {}\n", needs: false},
		{name: "env without sandbox block needs one", src: "env \"e\" {}\n", needs: true, severity: hcl.DiagError, diagSummary: "No sandbox block"},
		{name: "the only sandbox is linked", src: "sandbox \"s\" { backend = \"local\" }\nenv \"e\" {}\n", needs: true, want: "s"},
		{name: "no-sandbox env ignores the only block quietly", src: "sandbox \"s\" { backend = \"local\" }\nenv \"e\" {}\n", needs: false},
		{name: "no-sandbox env naming one is warned", src: "sandbox \"s\" { backend = \"local\" }\nenv \"e\" { sandbox = sandbox.s }\n", needs: false, severity: hcl.DiagWarning, diagSummary: "Sandbox not used"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, diags := Parse("job.hcl", []byte(tc.src), nil)
			if diags.HasErrors() {
				t.Fatal(diags)
			}
			sb, diags := f.SandboxFor(f.Env(), tc.needs)
			got := ""
			if sb != nil {
				got = sb.Name
			}
			if got != tc.want {
				t.Errorf("sandbox %q, want %q", got, tc.want)
			}
			if tc.diagSummary == "" {
				if len(diags) > 0 {
					t.Errorf("diagnostics: %v", diags)
				}
				return
			}
			if len(diags) != 1 || diags[0].Severity != tc.severity || diags[0].Summary != tc.diagSummary || diags[0].Subject == nil {
				t.Errorf("diagnostics %v, want one %q", diags, tc.diagSummary)
			}
		})
	}
}
