package main

import (
	"slices"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"

	"github.com/rlhost/rlhost/host/config"
)

// The warm-up teaches the conversation the env holds: the job file's env
// block must offer the system prompt and tools the transcripts were
// rendered with.
func TestJobFileMatchesTheWarmUp(t *testing.T) {
	f, diags := config.Load("../../quickstart-tools.hcl", nil)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	env := f.Env()
	content, _, diags := env.Body.PartialContent(&hcl.BodySchema{Attributes: []hcl.AttributeSchema{
		{Name: "system_prompt", Required: true}, {Name: "tools", Required: true}}})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	var system string
	var tools []string
	if d := gohcl.DecodeExpression(content.Attributes["system_prompt"].Expr, f.EvalContext, &system); d.HasErrors() {
		t.Fatal(d)
	}
	if d := gohcl.DecodeExpression(content.Attributes["tools"].Expr, f.EvalContext, &tools); d.HasErrors() {
		t.Fatal(d)
	}
	if system != System || !slices.Equal(tools, Tools) {
		t.Errorf("quickstart-tools.hcl offers system prompt %q and tools %v; the warm-up was made with %q and %v", system, tools, System, Tools)
	}
}
