package config

import (
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"

	"github.com/rlhost/rlhost/host/pluginmgr"
)

// pythonSchema is the host's extra setting of an env block whose plugin is a
// Python script. Only there: other plugins may declare a python setting of
// their own (the built-in coding env does, for the sandbox's interpreter).
var pythonSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "python"}}}

// pythonPlugin takes the python setting out of the block of a .py plugin and
// folds it into the plugin reference, which is all the plugin manager is
// given: the script runs under e.Python, or python3.
func (e *Env) pythonPlugin(ctx *hcl.EvalContext) hcl.Diagnostics {
	if !strings.HasSuffix(e.Plugin, ".py") {
		return nil
	}
	content, remain, diags := e.Body.PartialContent(pythonSchema)
	e.Body = remain
	if a, ok := content.Attributes["python"]; ok {
		e.AttrRanges["python"] = a.Expr.Range()
		diags = append(diags, gohcl.DecodeExpression(a.Expr, ctx, &e.Python)...)
	}
	e.Plugin = pluginmgr.WithPython(e.Plugin, e.Python)
	return diags
}
