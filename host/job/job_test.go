package job

import (
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"

	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/host/config"
)

// A policy that New refuses is reported at the setting that caused it: one
// of the policy block's own, or, for the embedded provider's memory check,
// the trainer block's.
func TestNewPolicyPlacesDiagnostics(t *testing.T) {
	src := `policy "p" {
  provider = "replay"
  file     = "nope.jsonl"
}
trainer {
  micro_batch = 64
}
`
	// What the trainer refuses when it opens the embedded policy's engine.
	trainerErr := schema.Diagnostics{schema.Errorf([]string{"trainer", "micro_batch"}, "", "needs more memory")}.Err()
	for _, c := range []struct {
		name, summary, detail string
		line, col             int
		diags                 func(f *config.File) hcl.Diagnostics
	}{
		{"policy setting", "Invalid policy", `policy "p": file: open`, 3, 14,
			func(f *config.File) hcl.Diagnostics { _, d := NewPolicy(f); return d }},
		{"trainer setting", "Invalid trainer setting", "micro_batch: needs more memory", 6, 17,
			func(f *config.File) hcl.Diagnostics { return PolicyDiagnostics(f, trainerErr) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, diags := config.Parse("job.hcl", []byte(src), nil)
			if diags.HasErrors() {
				t.Fatal(diags)
			}
			diags = c.diags(f)
			if len(diags) != 1 {
				t.Fatalf("diags = %v", diags)
			}
			d := diags[0]
			if d.Summary != c.summary || !strings.HasPrefix(d.Detail, c.detail) || d.Subject == nil ||
				d.Subject.Start.Line != c.line || d.Subject.Start.Column != c.col {
				t.Errorf("got %q / %q at %v; want %q / %q... at %d:%d", d.Summary, d.Detail, d.Subject, c.summary, c.detail, c.line, c.col)
			}
		})
	}
}
