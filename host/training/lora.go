package training

import (
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/gocty"

	"github.com/rlhost/rlhost/core/suggest"
	"github.com/rlhost/rlhost/host/config"
	"github.com/rlhost/rlhost/trainer/grpo"
	"github.com/rlhost/rlhost/trainer/model"
)

// LoRA block defaults: PEFT's LoraConfig defaults (r 8, lora_alpha 8, no
// dropout), and PEFT's default target modules for Qwen2 and Llama models
// (q_proj, v_proj).
const (
	defaultLoRARank  = 8
	defaultLoRAAlpha = 8
)

var loraSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
	{Name: "rank"}, {Name: "alpha"}, {Name: "dropout"}, {Name: "target_modules"}, {Name: "rslora"}, {Name: "seed"},
}}

// moduleNames lists every accepted spelling of a target module, for
// suggestions.
func moduleNames() []string {
	var out []string
	for _, m := range model.Modules() {
		out = append(out, strings.TrimSuffix(m.String(), "_proj"), m.String())
	}
	return out
}

// defaultLoRA is the adapter an empty lora block trains.
func defaultLoRA() *grpo.LoRA {
	return &grpo.LoRA{AdapterConfig: model.AdapterConfig{Rank: defaultLoRARank, Alpha: defaultLoRAAlpha,
		Targets: []model.Module{model.QProj, model.VProj}}}
}

// decodeLoRA reads a trainer block's lora block.
func decodeLoRA(f *config.File, b *hcl.Block) (*grpo.LoRA, hcl.Diagnostics) {
	l := defaultLoRA()
	content, diags := b.Body.Content(loraSchema)
	if diags.HasErrors() {
		return nil, diags
	}
	bad := func(a *hcl.Attribute, detail string) {
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid lora setting",
			Detail: detail, Subject: a.Expr.Range().Ptr()})
	}
	// get evaluates attribute name into dst; false when absent or wrong.
	get := func(name string, dst any, want string) (*hcl.Attribute, bool) {
		a, ok := content.Attributes[name]
		if !ok {
			return nil, false
		}
		v, d := a.Expr.Value(f.EvalContext)
		diags = append(diags, d...)
		if d.HasErrors() {
			return a, false
		}
		if v.IsNull() || gocty.FromCtyValue(v, dst) != nil {
			bad(a, fmt.Sprintf("%s must be %s.", name, want))
			return a, false
		}
		return a, true
	}
	var rank int
	if a, ok := get("rank", &rank, "a whole number"); ok {
		if rank < 1 {
			bad(a, fmt.Sprintf("rank %d must be at least 1.", rank))
		}
		l.Rank = rank
	}
	var alpha float64
	if a, ok := get("alpha", &alpha, "a number"); ok {
		if !(alpha > 0) {
			bad(a, fmt.Sprintf("alpha %g must be positive (the adapter is scaled by alpha/rank).", alpha))
		}
		l.Alpha = alpha
	}
	var dropout float64
	if a, ok := get("dropout", &dropout, "a number"); ok {
		if !(dropout >= 0 && dropout < 1) {
			bad(a, fmt.Sprintf("dropout %g must be in [0, 1).", dropout))
		}
		l.Dropout = dropout
	}
	get("rslora", &l.RSLoRA, "true or false")
	var seed int64
	if a, ok := get("seed", &seed, "a whole number"); ok {
		if seed < 0 {
			bad(a, "seed must be >= 0.")
		}
		l.Seed = uint64(seed)
	}
	if a, ok := content.Attributes["target_modules"]; ok {
		l.Targets = nil
		diags = append(diags, decodeTargets(f, a, l)...)
	}
	return l, diags
}

// decodeTargets reads target_modules element by element, so a typo is
// reported at its own position with the name meant.
func decodeTargets(f *config.File, a *hcl.Attribute, l *grpo.LoRA) hcl.Diagnostics {
	exprs, diags := hcl.ExprList(a.Expr)
	if diags.HasErrors() {
		return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Invalid lora setting",
			Detail: `target_modules must be a list of module names, such as ["q", "v"] or ["q_proj", "v_proj"].`, Subject: a.Expr.Range().Ptr()}}
	}
	if len(exprs) == 0 {
		return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Invalid lora setting",
			Detail: "target_modules is empty: name at least one of " + strings.Join(moduleNames(), ", ") + ".", Subject: a.Expr.Range().Ptr()}}
	}
	for _, e := range exprs {
		v, d := e.Value(f.EvalContext)
		diags = append(diags, d...)
		if d.HasErrors() {
			continue
		}
		if v.IsNull() || !v.Type().Equals(cty.String) {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid lora setting",
				Detail: "target_modules entries must be strings.", Subject: e.Range().Ptr()})
			continue
		}
		name := v.AsString()
		m, ok := model.ParseModule(name)
		if !ok {
			detail := fmt.Sprintf("%q is not a module LoRA can adapt; the modules are q, k, v, o, gate, up, down (or q_proj ... down_proj).", name)
			if s := suggest.Closest(name, moduleNames()); s != "" {
				detail = fmt.Sprintf("%q is not a module LoRA can adapt. Did you mean %q?", name, s)
			}
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Unknown target module", Detail: detail, Subject: e.Range().Ptr()})
			continue
		}
		if slices.Contains(l.Targets, m) {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Duplicate target module",
				Detail: fmt.Sprintf("%q names %s, which is already in target_modules.", name, m), Subject: e.Range().Ptr()})
			continue
		}
		l.Targets = append(l.Targets, m)
	}
	slices.Sort(l.Targets)
	return diags
}
