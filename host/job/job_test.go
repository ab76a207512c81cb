package job

import (
	"strings"
	"testing"

	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/host/config"
	"github.com/rlhost/rlhost/host/policy"
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
	trainerErr := policy.WithProvider("big", func(cfg policy.Config, _ string) (policy.Policy, error) {
		return nil, schema.Diagnostics{schema.Errorf([]string{"trainer", "micro_batch"}, "", "needs more memory")}.Err()
	})
	for _, c := range []struct {
		name, provider, summary, detail string
		line, col                       int
	}{
		{"policy setting", "replay", "Invalid policy", `policy "p": file: open`, 3, 14},
		{"trainer setting", "big", "Invalid trainer setting", "micro_batch: needs more memory", 6, 17},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, diags := config.Parse("job.hcl", []byte(strings.Replace(src, `"replay"`, `"`+c.provider+`"`, 1)), nil)
			if diags.HasErrors() {
				t.Fatal(diags)
			}
			_, diags = NewPolicy(f, []policy.Option{trainerErr})
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
