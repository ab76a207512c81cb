package config

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	ctyjson "github.com/zclconf/go-cty/cty/json"

	"github.com/rlhost/rlhost/core/schema"
)

// SpecFor turns a plugin's schema into an hcldec spec.
func SpecFor(s schema.Spec) (hcldec.Spec, error) {
	obj := hcldec.ObjectSpec{}
	for _, a := range s.Attributes {
		if a.Name == "" || a.Type == cty.NilType {
			return nil, fmt.Errorf("schema attribute %q has no name or type", a.Name)
		}
		var spec hcldec.Spec = &hcldec.AttrSpec{Name: a.Name, Type: a.Type, Required: a.Required}
		if len(a.Default) > 0 {
			def, err := ctyjson.Unmarshal(a.Default, a.Type)
			if err != nil {
				return nil, fmt.Errorf("schema attribute %q: default %s is not a %s: %w", a.Name, a.Default, a.Type.FriendlyName(), err)
			}
			spec = &hcldec.DefaultSpec{Primary: spec, Default: &hcldec.LiteralSpec{Value: def}}
		}
		obj[a.Name] = spec
	}
	for _, b := range s.Blocks {
		nested, err := SpecFor(b.Spec)
		if err != nil {
			return nil, fmt.Errorf("schema block %q: %w", b.Name, err)
		}
		switch b.Nesting {
		case schema.NestingList:
			min := 0
			if b.Required {
				min = 1
			}
			obj[b.Name] = &hcldec.BlockListSpec{TypeName: b.Name, Nested: nested, MinItems: min}
		default:
			obj[b.Name] = &hcldec.BlockSpec{TypeName: b.Name, Nested: nested, Required: b.Required}
		}
	}
	return obj, nil
}

// DecodePluginBody decodes the plugin-owned part of a block against the
// plugin's schema and returns it as plain JSON. Unknown attributes, missing
// required ones and type errors come back as diagnostics with ranges.
func DecodePluginBody(body hcl.Body, s schema.Spec, ctx *hcl.EvalContext, pluginName string) ([]byte, hcl.Diagnostics) {
	spec, err := SpecFor(s)
	if err != nil {
		return nil, hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Invalid plugin schema", Detail: fmt.Sprintf("Plugin %q declares a broken config schema: %v", pluginName, err)}}
	}
	val, diags := hcldec.Decode(body, spec, ctx)
	if diags.HasErrors() {
		return nil, diags
	}
	if !val.IsWhollyKnown() {
		return nil, append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Unknown value", Detail: "A plugin setting depends on a value that is not known."})
	}
	b, err := ctyjson.Marshal(val, val.Type())
	if err != nil {
		return nil, append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Cannot encode plugin config", Detail: err.Error()})
	}
	return b, diags
}

// Origin is where diagnostics with a setting path are placed: a block of
// the job file, and who judged it.
type Origin struct {
	What      string               // who found the problems, e.g. "plugin coding" or `policy "p"`; "" for the host's own
	Body      hcl.Body             // the block's body (for a plugin block, the part the plugin owns)
	HostAttrs map[string]hcl.Range // settings the host decoded out of Body, by path ("limits.memory")
	Block     hcl.Range            // blamed when no setting matches
	Spec      schema.Spec          // the block's schema: settings marked sensitive are never echoed
}

// InConfigBody places diagnostics in the job file, like Terraform's
// InConfigBody: a Path is looked up first in Body, then among HostAttrs,
// then by its first element among HostAttrs, else the whole block is
// blamed. It is the one mapping from setting paths to source ranges, used
// for plugins, the policy and trainer blocks and the host's own checks.
// A diagnostic about a sensitive setting written in the block names its
// location in the text but carries no Subject, so renderers never echo the
// line (an API key written inline); one about a sensitive setting the block
// leaves out has no value to hide and is shown as any other.
func InConfigBody(ds schema.Diagnostics, o Origin) hcl.Diagnostics {
	sensitive := map[string]bool{}
	for _, a := range o.Spec.Attributes {
		if a.Sensitive {
			sensitive[a.Name] = true
		}
	}
	var out hcl.Diagnostics
	for _, d := range ds {
		sev := hcl.DiagError
		if d.Severity == schema.Warning {
			sev = hcl.DiagWarning
		}
		rng := o.Block
		written := false // the setting is in the block's text
		if r, ok := findPath(o.Body, d.Path); ok {
			rng, written = r, true
		} else if r, ok := o.HostAttrs[strings.Join(d.Path, ".")]; ok && len(d.Path) > 0 {
			rng = r
		} else if len(d.Path) > 0 {
			if r, ok := o.HostAttrs[d.Path[0]]; ok {
				rng = r
			}
		}
		summary, detail := d.Summary, d.Detail
		if summary == "" {
			summary, detail = detail, ""
		}
		if o.What != "" {
			summary = fmt.Sprintf("%s (%s)", summary, o.What)
			if len(d.Path) > 0 {
				detail = strings.TrimSpace(fmt.Sprintf("%s (setting %s)", detail, strings.Join(d.Path, ".")))
			}
		}
		diag := &hcl.Diagnostic{Severity: sev, Summary: summary, Detail: detail}
		if rng.Filename != "" {
			diag.Subject = rng.Ptr()
		}
		if written && sensitive[d.Path[0]] {
			diag.Subject = nil
			diag.Detail = fmt.Sprintf("%s:%d:%d: %s (the value is sensitive and not shown)", rng.Filename, rng.Start.Line, rng.Start.Column, detail)
		}
		out = append(out, diag)
	}
	return out
}

// PluginDiagnostics places a plugin's diagnostics about its block.
func PluginDiagnostics(ds schema.Diagnostics, spec schema.Spec, pluginName string, body hcl.Body, hostAttrs map[string]hcl.Range, block hcl.Range) hcl.Diagnostics {
	return InConfigBody(ds, Origin{What: "plugin " + pluginName, Body: body, HostAttrs: hostAttrs, Block: block, Spec: spec})
}

// Setting names the host decodes itself in each kind of block; a plugin
// schema may not declare them, or its setting would never be reached.
// (exec_timeout is gone; the host still claims it, to say what replaced
// it.)
var (
	ReservedSandboxSettings = []string{"backend", "plugin", "timeout", "image", "rootfs", "env", "labels", "ttl", "network", "workdir", "limits", "exec_timeout"}
	ReservedEnvSettings     = []string{"plugin", "sandbox", "pass_env"}
)

// CheckReserved reports schema entries that collide with host settings.
func CheckReserved(spec schema.Spec, reserved []string, pluginName string) error {
	var bad []string
	for _, a := range spec.Attributes {
		if slices.Contains(reserved, a.Name) {
			bad = append(bad, a.Name)
		}
	}
	for _, b := range spec.Blocks {
		if slices.Contains(reserved, b.Name) {
			bad = append(bad, b.Name)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("plugin %q declares settings that rlhost reserves for itself: %s (rename them in the plugin)", pluginName, strings.Join(bad, ", "))
	}
	return nil
}

// findPath walks attribute/block names through a native-syntax body. A
// numeric element after a block name picks the i-th block of that type
// (["task", "2", "id"]). JSON bodies fall back to the block range.
func findPath(body hcl.Body, path []string) (hcl.Range, bool) {
	sb, ok := body.(*hclsyntax.Body)
	if !ok || len(path) == 0 {
		return hcl.Range{}, false
	}
	for i := 0; i < len(path); i++ {
		name := path[i]
		if a, ok := sb.Attributes[name]; ok {
			return a.Expr.Range(), true
		}
		var matches []*hclsyntax.Block
		for _, b := range sb.Blocks {
			if b.Type == name {
				matches = append(matches, b)
			}
		}
		if len(matches) == 0 {
			return hcl.Range{}, false
		}
		next := matches[0]
		if i+1 < len(path) {
			if n, err := strconv.Atoi(path[i+1]); err == nil {
				if n < 0 || n >= len(matches) {
					return hcl.Range{}, false
				}
				next = matches[n]
				i++
			}
		}
		if i == len(path)-1 {
			return next.DefRange(), true
		}
		sb = next.Body
	}
	return hcl.Range{}, false
}

// MarshalRedacted re-encodes a decoded config for display (`rlhost validate`),
// replacing sensitive attributes so keys never reach a terminal or log.
func MarshalRedacted(cfg []byte, s schema.Spec) []byte {
	var m map[string]any
	if json.Unmarshal(cfg, &m) != nil {
		return cfg
	}
	for _, a := range s.Attributes {
		if a.Sensitive {
			if _, ok := m[a.Name]; ok {
				m[a.Name] = "(sensitive)"
			}
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return cfg
	}
	return b
}
