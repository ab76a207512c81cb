package config

import (
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/rlhost/rlhost/host/pluginmgr"
)

// pythonPlugin checks the python setting of an env block and folds it into
// the plugin reference, which is all the plugin manager is given: a .py
// plugin runs under e.Python, or python3.
func (e *Env) pythonPlugin() hcl.Diagnostics {
	if e.Python == "" {
		return nil
	}
	if !strings.HasSuffix(e.Plugin, ".py") {
		rng := e.AttrRanges["python"]
		return hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "python needs a Python plugin",
			Detail:   "python names the interpreter of a plugin script ending in .py, such as plugin = \"./my_env.py\"; this block's plugin is " + e.Plugin + ".",
			Subject:  rng.Ptr(),
		}}
	}
	e.Plugin = pluginmgr.WithPython(e.Plugin, e.Python)
	return nil
}
