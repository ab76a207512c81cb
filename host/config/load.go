package config

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/duration"
	"github.com/rlhost/rlhost/core/labels"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/core/suggest"
)

var topSchema = &hcl.BodySchema{
	Blocks: []hcl.BlockHeaderSchema{
		{Type: "variable", LabelNames: []string{"name"}},
		{Type: "run"},
		{Type: "sandbox", LabelNames: []string{"name"}},
		{Type: "env", LabelNames: []string{"name"}},
		{Type: "policy", LabelNames: []string{"name"}},
		{Type: "output"},
		{Type: "trainer"},
		{Type: "eval"},
	},
}

// Load reads and decodes the job file at path. vars holds --var values
// (name → raw string). It returns every problem it can find, not just the
// first, each with its source range.
func Load(path string, vars map[string]string) (*File, hcl.Diagnostics) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Cannot read config file", Detail: err.Error()}}
	}
	return Parse(path, src, vars)
}

// Parse decodes a job file from memory; path is used for diagnostics and
// as the base of relative paths.
func Parse(path string, src []byte, vars map[string]string) (*File, hcl.Diagnostics) {
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	parser := hclparse.NewParser()
	var hf *hcl.File
	var diags hcl.Diagnostics
	if strings.HasSuffix(path, ".json") {
		hf, diags = parser.ParseJSON(src, path)
	} else {
		hf, diags = parser.ParseHCL(src, path)
	}
	f := &File{Path: path, Dir: filepath.Dir(abs), Files: parser.Files()}
	if diags.HasErrors() {
		return f, diags
	}
	content, cd := hf.Body.Content(topSchema)
	diags = append(diags, cd...)

	d := &decoder{f: f, blocks: content.Blocks}
	diags = append(diags, d.variables(vars)...)
	if diags.HasErrors() {
		return f, diags
	}
	diags = append(diags, d.run()...)
	diags = append(diags, d.output()...)
	diags = append(diags, d.sandboxes()...)
	diags = append(diags, d.envs()...)
	diags = append(diags, d.policies()...)
	diags = append(diags, d.trainer()...)
	diags = append(diags, d.eval()...)
	diags = append(diags, d.links()...)
	return f, diags
}

type decoder struct {
	f      *File
	blocks hcl.Blocks
	vars   map[string]cty.Value
}

// labelled returns the blocks of type t, reporting any whose label repeats
// an earlier one.
func (d *decoder) labelled(t string) (hcl.Blocks, hcl.Diagnostics) {
	var out hcl.Blocks
	var diags hcl.Diagnostics
	seen := map[string]bool{}
	for _, b := range d.ofType(t) {
		name := b.Labels[0]
		if seen[name] {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Duplicate " + t + " block", Detail: fmt.Sprintf("A %s named %q is already defined.", t, name), Subject: b.DefRange.Ptr()})
			continue
		}
		seen[name] = true
		out = append(out, b)
	}
	return out, diags
}

func (d *decoder) ofType(t string) hcl.Blocks {
	var out hcl.Blocks
	for _, b := range d.blocks {
		if b.Type == t {
			out = append(out, b)
		}
	}
	return out
}

// variables resolves variable blocks against --var values and builds the
// evaluation context every later block is decoded with.
func (d *decoder) variables(given map[string]string) hcl.Diagnostics {
	var diags hcl.Diagnostics
	d.vars = map[string]cty.Value{}
	declared := map[string]bool{}
	for _, b := range d.ofType("variable") {
		name := b.Labels[0]
		if declared[name] {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Duplicate variable", Detail: fmt.Sprintf("Variable %q is declared twice.", name), Subject: b.DefRange.Ptr()})
			continue
		}
		declared[name] = true
		var v struct {
			Default *hcl.Attribute
		}
		attrs, ad := b.Body.JustAttributes()
		diags = append(diags, ad...)
		for an, a := range attrs {
			switch an {
			case "default":
				v.Default = a
			case "description":
				var desc string
				// Kept for variables left at their default: a value the
				// user chose needs no explaining.
				if _, given := given[name]; given {
					continue
				}
				if dd := gohcl.DecodeExpression(a.Expr, nil, &desc); !dd.HasErrors() && desc != "" {
					if d.f.VarDescriptions == nil {
						d.f.VarDescriptions = map[string]string{}
					}
					d.f.VarDescriptions[name] = desc
				} else {
					diags = append(diags, dd...)
				}
			default:
				diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Unsupported argument", Detail: fmt.Sprintf("A variable block accepts only default and description, not %q.", an), Subject: a.NameRange.Ptr()})
			}
		}
		var def cty.Value = cty.NilVal
		if v.Default != nil {
			val, vd := v.Default.Expr.Value(nil)
			diags = append(diags, vd...)
			def = val
		}
		raw, ok := given[name]
		switch {
		case ok && def != cty.NilVal && !def.Type().Equals(cty.String):
			conv, err := convert.Convert(cty.StringVal(raw), def.Type())
			if err != nil {
				diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid value for variable", Detail: fmt.Sprintf("--var %s=%q: %v (the default is a %s).", name, raw, err, def.Type().FriendlyName()), Subject: b.DefRange.Ptr()})
				continue
			}
			d.vars[name] = conv
		case ok:
			d.vars[name] = cty.StringVal(raw)
		case def != cty.NilVal:
			d.vars[name] = def
		default:
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "No value for required variable", Detail: fmt.Sprintf("Variable %q has no default; pass --var %s=VALUE.", name, name), Subject: b.DefRange.Ptr()})
		}
	}
	var unknown []string
	for name := range given {
		if !declared[name] {
			unknown = append(unknown, name)
		}
	}
	sort.Strings(unknown)
	var names []string
	for n := range declared {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range unknown {
		detail := fmt.Sprintf("--var %s was given, but the config declares no variable %q. Add a variable %q {} block.", name, name, name)
		if s := suggest.Closest(name, names); s != "" {
			detail = fmt.Sprintf("--var %s was given, but the config declares no variable %q. Did you mean --var %s?", name, name, s)
		} else if len(names) > 0 {
			detail += fmt.Sprintf(" The variables it declares: %s.", strings.Join(names, ", "))
		}
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Undeclared variable", Detail: detail})
	}
	d.f.EvalContext = evalContext(d.f.Dir, d.vars, d.names())
	return diags
}

// namesHint ends a sentence about a name that matches none of names:
// "; did you mean "X"?" for a near miss, else "; the names are "A", "B"."
// (just "." when there are none).
func namesHint(got string, names []string) string {
	if s := suggest.Closest(got, names); s != "" {
		return fmt.Sprintf("; did you mean %q?", s)
	}
	if len(names) == 0 {
		return "."
	}
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return "; the names are " + strings.Join(q, ", ") + "."
}

// names lists the labels of sandbox, env and policy blocks so that
// `sandbox = sandbox.local` is a checked reference, not a bare string.
func (d *decoder) names() map[string]cty.Value {
	out := map[string]cty.Value{}
	for _, kind := range []string{"sandbox", "env", "policy"} {
		m := map[string]cty.Value{}
		for _, b := range d.ofType(kind) {
			m[b.Labels[0]] = cty.StringVal(b.Labels[0])
		}
		out[kind] = cty.ObjectVal(m)
	}
	return out
}

type runHCL struct {
	Name           *string  `hcl:"name,optional"`
	Steps          *int     `hcl:"steps,optional"`
	BatchSize      *int     `hcl:"batch_size,optional"`
	GroupSize      *int     `hcl:"group_size,optional"`
	Seed           *int64   `hcl:"seed,optional"`
	Concurrency    *int     `hcl:"concurrency,optional"`
	MaxTurns       *int     `hcl:"max_turns,optional"`
	EpisodeTimeout *string  `hcl:"episode_timeout,optional"`
	MaxOffPolicy   *int     `hcl:"max_off_policy_steps,optional"`
	Env            *string  `hcl:"env,optional"`
	Policy         *string  `hcl:"policy,optional"`
	Remain         hcl.Body `hcl:",remain"`
}

func (d *decoder) run() hcl.Diagnostics {
	var diags hcl.Diagnostics
	r := &d.f.Run
	*r = Run{Name: nameFromFile(d.f.Path), Steps: DefaultSteps, BatchSize: DefaultBatchSize,
		GroupSize: DefaultGroupSize, Concurrency: DefaultConcurrency, MaxTurns: DefaultMaxTurns, EpisodeTimeout: DefaultEpisodeTimeout}
	blocks := d.ofType("run")
	if len(blocks) > 1 {
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Duplicate run block", Detail: "Only one run block is allowed.", Subject: blocks[1].DefRange.Ptr()})
	}
	if len(blocks) == 0 {
		d.addRunVar()
		return diags
	}
	b := blocks[0]
	r.DefRange = b.DefRange
	r.AttrRanges = map[string]hcl.Range{}
	if sb, ok := b.Body.(*hclsyntax.Body); ok {
		for name, a := range sb.Attributes {
			r.AttrRanges[name] = a.Expr.Range()
		}
	}
	var h runHCL
	diags = append(diags, gohcl.DecodeBody(b.Body, d.f.EvalContext, &h)...)
	diags = append(diags, noRemain(h.Remain, &h)...)
	positive := func(name string, p *int, dst *int, min int) {
		if p == nil {
			return
		}
		if *p < min {
			diags = append(diags, AttributeDiag(b.Body, b.DefRange, name, "Invalid value", fmt.Sprintf("%s must be at least %d, got %d.", name, min, *p)))
			return
		}
		*dst = *p
	}
	if h.Name != nil {
		r.Name = *h.Name
		if !validName(r.Name) {
			diags = append(diags, AttributeDiag(b.Body, b.DefRange, "name", "Invalid run name", "Use letters, digits, '-', '_' and '.' only: the name becomes part of paths and labels."))
		}
	}
	positive("steps", h.Steps, &r.Steps, 1)
	positive("batch_size", h.BatchSize, &r.BatchSize, 1)
	positive("group_size", h.GroupSize, &r.GroupSize, 1)
	positive("concurrency", h.Concurrency, &r.Concurrency, 1)
	positive("max_turns", h.MaxTurns, &r.MaxTurns, 1)
	if h.Seed != nil {
		r.Seed = *h.Seed
	}
	if h.MaxOffPolicy != nil {
		if *h.MaxOffPolicy < 0 {
			diags = append(diags, AttributeDiag(b.Body, b.DefRange, "max_off_policy_steps", "Invalid value",
				fmt.Sprintf("max_off_policy_steps must be at least 0 (0 trains on every step's own rollouts), got %d.", *h.MaxOffPolicy)))
		} else {
			k := *h.MaxOffPolicy
			r.MaxOffPolicySteps = &k
		}
	}
	if h.EpisodeTimeout != nil {
		dur, err := duration.Positive(*h.EpisodeTimeout)
		if err != nil {
			diags = append(diags, AttributeDiag(b.Body, b.DefRange, "episode_timeout", "Invalid duration", err.Error()))
		} else {
			r.EpisodeTimeout = dur
		}
	}
	if h.Env != nil {
		r.Env = *h.Env
	}
	if h.Policy != nil {
		r.Policy = *h.Policy
	}
	d.addRunVar()
	return diags
}

func (d *decoder) addRunVar() {
	r := d.f.Run
	d.f.EvalContext.Variables["run"] = cty.ObjectVal(map[string]cty.Value{
		"name": cty.StringVal(r.Name), "steps": cty.NumberIntVal(int64(r.Steps)),
		"batch_size": cty.NumberIntVal(int64(r.BatchSize)), "group_size": cty.NumberIntVal(int64(r.GroupSize)),
		"seed": cty.NumberIntVal(r.Seed),
	})
}

func (d *decoder) output() hcl.Diagnostics {
	var diags hcl.Diagnostics
	d.f.Output.Dir = filepath.Join("runs", d.f.Run.Name)
	blocks := d.ofType("output")
	if len(blocks) > 1 {
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Duplicate output block", Detail: "Only one output block is allowed.", Subject: blocks[1].DefRange.Ptr()})
	}
	if len(blocks) == 0 {
		return diags
	}
	var h struct {
		Dir    *string  `hcl:"dir,optional"`
		Remain hcl.Body `hcl:",remain"`
	}
	diags = append(diags, gohcl.DecodeBody(blocks[0].Body, d.f.EvalContext, &h)...)
	diags = append(diags, noRemain(h.Remain, &h)...)
	if h.Dir != nil {
		if *h.Dir == "" {
			diags = append(diags, AttributeDiag(blocks[0].Body, blocks[0].DefRange, "dir", "Invalid output dir", "dir must not be empty."))
		} else {
			d.f.Output.Dir = *h.Dir
		}
	}
	return diags
}

// sandboxSchema is the settings every backend shares
// (ReservedSandboxSettings: limits is a block, the rest attributes).
// Anything else in a sandbox block belongs to the backend plugin's schema.
func sandboxSchema() *hcl.BodySchema {
	s := &hcl.BodySchema{}
	for _, name := range ReservedSandboxSettings {
		if name == "limits" {
			s.Blocks = append(s.Blocks, hcl.BlockHeaderSchema{Type: name})
		} else {
			s.Attributes = append(s.Attributes, hcl.AttributeSchema{Name: name})
		}
	}
	return s
}

type limitsHCL struct {
	CPUTime   *string  `hcl:"cpu_time,optional"`
	Memory    *string  `hcl:"memory,optional"`
	Pids      *int     `hcl:"pids,optional"`
	FileSize  *string  `hcl:"file_size,optional"`
	OpenFiles *int     `hcl:"open_files,optional"`
	Tmp       *string  `hcl:"tmp,optional"`
	Output    *string  `hcl:"output,optional"`
	Disk      *string  `hcl:"disk,optional"`
	CPUs      *float64 `hcl:"cpus,optional"`
	Remain    hcl.Body `hcl:",remain"`
}

func (d *decoder) sandboxes() hcl.Diagnostics {
	blocks, diags := d.labelled("sandbox")
	for _, b := range blocks {
		name := b.Labels[0]
		content, remain, cd := b.Body.PartialContent(sandboxSchema())
		diags = append(diags, cd...)
		s := &Sandbox{Name: name, Body: remain, DefRange: b.DefRange, ExecTimeout: DefaultExecTimeout, AttrRanges: map[string]hcl.Range{}}
		ctx := d.f.EvalContext
		for an, a := range content.Attributes {
			s.AttrRanges[an] = a.Expr.Range()
			switch an {
			case "backend":
				diags = append(diags, gohcl.DecodeExpression(a.Expr, ctx, &s.Backend)...)
			case "plugin":
				diags = append(diags, gohcl.DecodeExpression(a.Expr, ctx, &s.Plugin)...)
			case "image":
				diags = append(diags, gohcl.DecodeExpression(a.Expr, ctx, &s.Spec.Image)...)
			case "rootfs":
				var p string
				diags = append(diags, gohcl.DecodeExpression(a.Expr, ctx, &p)...)
				s.Spec.Rootfs = d.path(p)
			case "workdir":
				diags = append(diags, gohcl.DecodeExpression(a.Expr, ctx, &s.Spec.Workdir)...)
			case "network":
				diags = append(diags, gohcl.DecodeExpression(a.Expr, ctx, &s.Spec.Network)...)
			case "env":
				diags = append(diags, gohcl.DecodeExpression(a.Expr, ctx, &s.Spec.Env)...)
			case "labels":
				diags = append(diags, gohcl.DecodeExpression(a.Expr, ctx, &s.Spec.Labels)...)
			case "timeout":
				diags = append(diags, durationAttr(a, ctx, duration.Positive, &s.ExecTimeout)...)
			case "ttl":
				diags = append(diags, durationAttr(a, ctx, duration.Parse, &s.Spec.TTL)...)
			case "exec_timeout":
				value := `"60s"`
				if hf := d.f.Files[a.Expr.Range().Filename]; hf != nil {
					value = string(a.Expr.Range().SliceBytes(hf.Bytes))
				}
				diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "exec_timeout was removed",
					Detail: fmt.Sprintf("The sandbox block's timeout is the one exec timeout, for every backend (default 30s): write timeout = %s instead. "+
						"An env may still set its own limit for one command.", value),
					Subject: a.NameRange.Ptr()})
			}
		}
		for k := range s.Spec.Labels {
			if labels.Reserved(k) {
				diags = append(diags, AttributeDiag(nil, s.AttrRanges["labels"], "", "Reserved label", fmt.Sprintf("Label %q uses the reserved prefix \"rlhost.\", which rlhost sets itself.", k)))
			}
		}
		if s.Backend == "" && s.Plugin == "" {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Missing backend", Detail: fmt.Sprintf("Sandbox %q needs backend = \"local\" (or \"daytona\"), or plugin = \"./path/to/plugin\".", name), Subject: b.DefRange.Ptr()})
		}
		for i, lb := range content.Blocks {
			if i > 0 {
				diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Duplicate limits block", Detail: "Only one limits block is allowed per sandbox.", Subject: lb.DefRange.Ptr()})
				continue
			}
			diags = append(diags, decodeLimits(lb, ctx, &s.Spec.Limits)...)
			s.AttrRanges["limits"] = lb.DefRange
			if body, ok := lb.Body.(*hclsyntax.Body); ok {
				for name, a := range body.Attributes {
					// Plugin diagnostics name limits as the job file does.
					s.AttrRanges["limits."+name] = a.Expr.Range()
				}
			}
		}
		d.f.Sandboxes = append(d.f.Sandboxes, s)
	}
	return diags
}

func decodeLimits(b *hcl.Block, ctx *hcl.EvalContext, l *core.Limits) hcl.Diagnostics {
	var h limitsHCL
	diags := gohcl.DecodeBody(b.Body, ctx, &h)
	diags = append(diags, noRemain(h.Remain, &h)...)
	size := func(name string, p *string, dst *int64) {
		if p == nil {
			return
		}
		v, err := ParseSize(*p)
		if err != nil {
			diags = append(diags, AttributeDiag(b.Body, b.DefRange, name, "Invalid size", err.Error()))
			return
		}
		*dst = v
	}
	count := func(name string, p *int, dst *int) {
		if p == nil {
			return
		}
		if *p < 1 {
			diags = append(diags, AttributeDiag(b.Body, b.DefRange, name, "Invalid limit", fmt.Sprintf("%s must be at least 1.", name)))
			return
		}
		*dst = *p
	}
	size("memory", h.Memory, &l.MemoryBytes)
	size("file_size", h.FileSize, &l.FileSizeBytes)
	size("tmp", h.Tmp, &l.TmpBytes)
	size("output", h.Output, &l.OutputBytes)
	size("disk", h.Disk, &l.DiskBytes)
	count("pids", h.Pids, &l.Pids)
	count("open_files", h.OpenFiles, &l.OpenFiles)
	if h.CPUTime != nil {
		v, err := duration.Parse(*h.CPUTime)
		if err != nil {
			diags = append(diags, AttributeDiag(b.Body, b.DefRange, "cpu_time", "Invalid duration", err.Error()))
		} else {
			l.CPUTime = v
		}
	}
	if h.CPUs != nil {
		if *h.CPUs <= 0 {
			diags = append(diags, AttributeDiag(b.Body, b.DefRange, "cpus", "Invalid limit", "cpus must be positive."))
		} else {
			l.CPUs = *h.CPUs
		}
	}
	return diags
}

var envSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "plugin"}, {Name: "sandbox"}, {Name: "pass_env"}}}

func (d *decoder) envs() hcl.Diagnostics {
	blocks, diags := d.labelled("env")
	for _, b := range blocks {
		name := b.Labels[0]
		content, remain, cd := b.Body.PartialContent(envSchema)
		diags = append(diags, cd...)
		e := &Env{Name: name, Plugin: name, Body: remain, DefRange: b.DefRange, AttrRanges: map[string]hcl.Range{}}
		for an, a := range content.Attributes {
			e.AttrRanges[an] = a.Expr.Range()
			switch an {
			case "plugin":
				diags = append(diags, gohcl.DecodeExpression(a.Expr, d.f.EvalContext, &e.Plugin)...)
			case "sandbox":
				diags = append(diags, gohcl.DecodeExpression(a.Expr, d.f.EvalContext, &e.Sandbox)...)
			case "pass_env":
				diags = append(diags, gohcl.DecodeExpression(a.Expr, d.f.EvalContext, &e.PassEnv)...)
			}
		}
		diags = append(diags, e.pythonPlugin(d.f.EvalContext)...)
		d.f.Envs = append(d.f.Envs, e)
	}
	return diags
}

func (d *decoder) policies() hcl.Diagnostics {
	blocks, diags := d.labelled("policy")
	for _, b := range blocks {
		name := b.Labels[0]
		p := &PolicyBlock{Name: name, Body: b.Body, DefRange: b.DefRange}
		content, _, cd := b.Body.PartialContent(&hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "provider", Required: true}}})
		diags = append(diags, cd...)
		if a, ok := content.Attributes["provider"]; ok {
			diags = append(diags, gohcl.DecodeExpression(a.Expr, d.f.EvalContext, &p.Provider)...)
		}
		d.f.Policies = append(d.f.Policies, p)
	}
	return diags
}

// trainer keeps the trainer block's body for host/training, which owns its
// schema and decodes it with the run's evaluation context.
func (d *decoder) trainer() hcl.Diagnostics {
	blocks := d.ofType("trainer")
	if len(blocks) == 0 {
		return nil
	}
	if len(blocks) > 1 {
		return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Duplicate trainer block", Detail: "Only one trainer block is allowed.", Subject: blocks[1].DefRange.Ptr()}}
	}
	d.f.Trainer = &TrainerBlock{Body: blocks[0].Body, DefRange: blocks[0].DefRange}
	return nil
}

// eval keeps the eval block's body for host/eval, which owns its schema.
func (d *decoder) eval() hcl.Diagnostics {
	blocks := d.ofType("eval")
	if len(blocks) == 0 {
		return nil
	}
	if len(blocks) > 1 {
		return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Duplicate eval block", Detail: "Only one eval block is allowed.", Subject: blocks[1].DefRange.Ptr()}}
	}
	d.f.Eval = &Eval{Body: blocks[0].Body, DefRange: blocks[0].DefRange}
	return nil
}

// links checks the references between blocks and fills in the defaults that
// depend on them.
func (d *decoder) links() hcl.Diagnostics {
	var diags hcl.Diagnostics
	f := d.f
	sandboxes := map[string]bool{}
	for _, s := range f.Sandboxes {
		sandboxes[s.Name] = true
	}
	for _, e := range f.Envs {
		if e.Sandbox == "" {
			if len(f.Sandboxes) == 1 {
				e.Sandbox = f.Sandboxes[0].Name
			} else if len(f.Sandboxes) > 1 {
				diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Ambiguous sandbox", Detail: fmt.Sprintf("Env %q must say which sandbox block to use: sandbox = sandbox.NAME.", e.Name), Subject: e.DefRange.Ptr()})
			}
		} else if !sandboxes[e.Sandbox] {
			var names []string
			for _, s := range f.Sandboxes {
				names = append(names, s.Name)
			}
			diags = append(diags, AttributeDiag(nil, e.AttrRanges["sandbox"], "", "Unknown sandbox", fmt.Sprintf("No sandbox block is named %q%s", e.Sandbox, namesHint(e.Sandbox, names))))
		}
	}
	pick := func(kind, chosen string, names []string, ranges []hcl.Range, attr string) string {
		if chosen != "" {
			for _, n := range names {
				if n == chosen {
					return chosen
				}
			}
			rng := f.Run.AttrRanges[attr]
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Unknown " + kind, Detail: fmt.Sprintf("run.%s names %q, but no %s block has that name%s", attr, chosen, kind, namesHint(chosen, names)), Subject: rangePtr(rng, f.Run.DefRange)})
			return ""
		}
		switch len(names) {
		case 0:
			return ""
		case 1:
			return names[0]
		}
		// Point at the run block when there is one, else at the second
		// block of the kind: the one that made the choice ambiguous.
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Ambiguous " + kind, Detail: fmt.Sprintf("There are several %s blocks; set %s = %s.NAME in the run block.", kind, attr, kind), Subject: rangePtr(f.Run.DefRange, ranges[1])})
		return ""
	}
	var envNames, polNames []string
	var envRanges, polRanges []hcl.Range
	for _, e := range f.Envs {
		envNames, envRanges = append(envNames, e.Name), append(envRanges, e.DefRange)
	}
	for _, p := range f.Policies {
		polNames, polRanges = append(polNames, p.Name), append(polRanges, p.DefRange)
	}
	f.Run.Env = pick("env", f.Run.Env, envNames, envRanges, "env")
	f.Run.Policy = pick("policy", f.Run.Policy, polNames, polRanges, "policy")
	return diags
}

// rangePtr returns rng, or fallback when rng is unset (no such block).
func rangePtr(rng, fallback hcl.Range) *hcl.Range {
	if rng.Filename == "" {
		return fallback.Ptr()
	}
	return rng.Ptr()
}

// Env returns the env block the run uses, or nil.
func (f *File) Env() *Env {
	for _, e := range f.Envs {
		if e.Name == f.Run.Env {
			return e
		}
	}
	return nil
}

// Policy returns the policy block the run uses, or nil.
func (f *File) Policy() *PolicyBlock {
	for _, p := range f.Policies {
		if p.Name == f.Run.Policy {
			return p
		}
	}
	return nil
}

// Sandbox returns the sandbox block with the given name, or nil.
func (f *File) Sandbox(name string) *Sandbox {
	for _, s := range f.Sandboxes {
		if s.Name == name {
			return s
		}
	}
	return nil
}

func (d *decoder) path(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(d.f.Dir, p)
}

func durationAttr(a *hcl.Attribute, ctx *hcl.EvalContext, parse func(string) (time.Duration, error), dst *time.Duration) hcl.Diagnostics {
	var s string
	diags := gohcl.DecodeExpression(a.Expr, ctx, &s)
	if diags.HasErrors() {
		return diags
	}
	v, err := parse(s)
	if err != nil {
		return append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid duration", Detail: err.Error(), Subject: a.Expr.Range().Ptr()})
	}
	*dst = v
	return diags
}

// noRemain reports attributes and blocks that no field of v (the struct
// the body was decoded into) claimed. Checking them against v's own schema
// lets HCL add "Did you mean ...?" for a near miss such as "stpes".
func noRemain(body hcl.Body, v any) hcl.Diagnostics {
	if body == nil {
		return nil
	}
	schema, _ := gohcl.ImpliedBodySchema(v)
	// The claimed attributes are already hidden from the remaining body;
	// none is required here, so listing them only feeds the suggestions.
	for i := range schema.Attributes {
		schema.Attributes[i].Required = false
	}
	_, diags := body.Content(schema)
	return diags
}

// attrErr makes an error pointing at attribute name of body when it can be
// found, else at fallback.
// AttributeDiag is an error at attribute name of a block (its whole
// expression), or at fallback (the block's header) when the block does not
// write it: the one way a block's setting is blamed, for the blocks this
// package decodes and for those others decode (the trainer block's).
func AttributeDiag(body hcl.Body, fallback hcl.Range, name, summary, detail string) *hcl.Diagnostic {
	var path []string
	if name != "" {
		path = []string{name}
	}
	d := schema.Diagnostic{Severity: schema.Error, Summary: summary, Detail: detail, Path: path}
	return InConfigBody(schema.Diagnostics{d}, Origin{Body: body, Block: fallback})[0]
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r == '-' || r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

// nameFromFile derives a default run name from the config's file name,
// replacing what cannot appear in paths and labels ("my job.hcl" → "my-job").
func nameFromFile(path string) string {
	base := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	out := []rune(base)
	for i, r := range out {
		if !validName(string(r)) {
			out[i] = '-'
		}
	}
	if len(out) == 0 {
		return "run"
	}
	return string(out)
}

// SandboxFor returns the sandbox block env e's episodes run in. needsSandbox
// is false for an env whose plugin declares it runs no commands
// (pluginbase.Info.NoSandbox): it gets nil, no sandbox block is needed, and
// one named by its sandbox attribute draws a warning that it is unused. For
// any other env a missing sandbox block is an error at the env block.
func (f *File) SandboxFor(e *Env, needsSandbox bool) (*Sandbox, hcl.Diagnostics) {
	if !needsSandbox {
		if rng, ok := e.AttrRanges["sandbox"]; ok {
			return nil, hcl.Diagnostics{{Severity: hcl.DiagWarning, Summary: "Sandbox not used",
				Detail:  fmt.Sprintf("The plugin of env %q runs no commands, so sandbox %q is not used; remove the sandbox attribute.", e.Name, e.Sandbox),
				Subject: rng.Ptr()}}
		}
		return nil, nil
	}
	if sb := f.Sandbox(e.Sandbox); sb != nil {
		return sb, nil
	}
	return nil, hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "No sandbox block",
		Detail:  fmt.Sprintf("Env %q needs a sandbox block, e.g. sandbox \"local\" { backend = \"local\" }.", e.Name),
		Subject: e.DefRange.Ptr()}}
}
