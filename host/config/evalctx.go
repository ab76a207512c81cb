package config

import (
	"os"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
)

// evalContext is what every expression in a job file can see: var.NAME,
// path.config (the file's directory), path.cwd, the block-name objects, and
// a small set of functions including env("NAME").
func evalContext(dir string, vars map[string]cty.Value, names map[string]cty.Value) *hcl.EvalContext {
	cwd, _ := os.Getwd()
	v := map[string]cty.Value{
		"var":  cty.ObjectVal(vars),
		"path": cty.ObjectVal(map[string]cty.Value{"config": cty.StringVal(dir), "cwd": cty.StringVal(cwd)}),
	}
	for k, val := range names {
		v[k] = val
	}
	return &hcl.EvalContext{
		Variables: v,
		Functions: map[string]function.Function{
			"env":        envFunc(),
			"lower":      stdlib.LowerFunc,
			"upper":      stdlib.UpperFunc,
			"format":     stdlib.FormatFunc,
			"join":       stdlib.JoinFunc,
			"concat":     stdlib.ConcatFunc,
			"coalesce":   stdlib.CoalesceFunc,
			"min":        stdlib.MinFunc,
			"max":        stdlib.MaxFunc,
			"jsonencode": stdlib.JSONEncodeFunc,
			"merge":      stdlib.MergeFunc,
		},
	}
}

// envFunc reads a host environment variable; a second argument is the
// default when it is unset. Values read this way stay in the host and in
// plugin configs; they never reach a sandbox unless put in its env map.
func envFunc() function.Function {
	return function.New(&function.Spec{
		Description: "Reads an environment variable of the rlhost process.",
		Params:      []function.Parameter{{Name: "name", Type: cty.String}},
		VarParam:    &function.Parameter{Name: "default", Type: cty.String},
		Type:        function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			if v, ok := os.LookupEnv(args[0].AsString()); ok {
				return cty.StringVal(v), nil
			}
			if len(args) > 1 {
				return args[1], nil
			}
			return cty.StringVal(""), nil
		},
	})
}
