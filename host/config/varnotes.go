package config

import (
	"fmt"
	"slices"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// VariableNotes explains the variables an expression in the job file
// reads, for a diagnostic whose Subject is rng: one line per variable
// with a description, "var.NAME (set with --var NAME=VALUE): DESCRIPTION". A job
// file's variable descriptions are where its author says what a value
// means and how to set it, so an error about a value that came from a
// variable ends with what to do next.
func (f *File) VariableNotes(rng hcl.Range) []string {
	if f == nil || len(f.VarDescriptions) == 0 || f.Files == nil {
		return nil
	}
	src, ok := f.Files[rng.Filename]
	if !ok || rng.End.Byte > len(src.Bytes) || rng.Start.Byte >= rng.End.Byte {
		return nil
	}
	expr, diags := hclsyntax.ParseExpression(src.Bytes[rng.Start.Byte:rng.End.Byte], rng.Filename, rng.Start)
	if diags.HasErrors() {
		return nil
	}
	var names []string
	for _, tr := range expr.Variables() {
		if tr.RootName() != "var" || len(tr) < 2 {
			continue
		}
		if a, ok := tr[1].(hcl.TraverseAttr); ok && !slices.Contains(names, a.Name) {
			names = append(names, a.Name)
		}
	}
	var out []string
	for _, n := range names {
		if desc := f.VarDescriptions[n]; desc != "" {
			out = append(out, fmt.Sprintf("var.%s (set with --var %s=VALUE): %s", n, n, desc))
		}
	}
	return out
}
