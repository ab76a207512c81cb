package config

import (
	"reflect"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// An error about a value read from a variable can say what the variable
// is for: its description, from the job file.
func TestVariableNotes(t *testing.T) {
	src := `
variable "model" {
  default     = ""
  description = "a model directory; without one, try --var policy=replay"
}
variable "plain" { default = "x" }
variable "policy" {
  default     = "embedded"
  description = "which policy block"
}
run {
  name = "n"
}
env "e" {
  plugin = "coding"
  a      = var.model
  b      = "${var.plain}-${var.policy}-${var.model}"
  c      = "literal"
}
`
	f, diags := Parse("job.hcl", []byte(src), nil)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	body := f.Files["job.hcl"].Body.(*hclsyntax.Body)
	var env *hclsyntax.Block
	for _, b := range body.Blocks {
		if b.Type == "env" {
			env = b
		}
	}
	rangeOf := func(name string) hcl.Range { return env.Body.Attributes[name].Expr.Range() }
	for _, tc := range []struct {
		attr string
		want []string
	}{
		{"a", []string{"var.model (set with --var model=VALUE): a model directory; without one, try --var policy=replay"}},
		{"b", []string{"var.policy (set with --var policy=VALUE): which policy block", "var.model (set with --var model=VALUE): a model directory; without one, try --var policy=replay"}},
		{"c", nil},
	} {
		if got := f.VariableNotes(rangeOf(tc.attr)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: notes %q, want %q", tc.attr, got, tc.want)
		}
	}
	// A range outside the file, or a file without descriptions, has none.
	if got := f.VariableNotes(hcl.Range{Filename: "other.hcl"}); got != nil {
		t.Errorf("other file: %q", got)
	}
	var none *File
	if got := none.VariableNotes(rangeOf("a")); got != nil {
		t.Errorf("nil file: %q", got)
	}
}

// A variable set on the command line needs no explaining.
func TestVariableNotesOnlyForDefaults(t *testing.T) {
	src := "variable \"model\" {\n  default = \"\"\n  description = \"a model\"\n}\nenv \"e\" {\n  plugin = \"coding\"\n  a = var.model\n}\n"
	f, diags := Parse("job.hcl", []byte(src), map[string]string{"model": "/m"})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	rng := f.Files["job.hcl"].Body.(*hclsyntax.Body).Blocks[1].Body.Attributes["a"].Expr.Range()
	if got := f.VariableNotes(rng); got != nil {
		t.Errorf("notes %q for a variable set with --var", got)
	}
}
