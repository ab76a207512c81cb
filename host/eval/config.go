package eval

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/host/config"
)

// Settings are the eval block's values.
//
//	eval {
//	  holdout          = ["squared"] # task ids kept out of training
//	  holdout_fraction = 0.25        # or a seeded share of the tasks
//	  seed             = 1           # of that share (default: run.seed)
//	  every            = 10          # evaluate every N training steps (TRL's eval_steps); 0: never
//	  samples          = 8           # episodes per task (default: run.group_size)
//	  k                = 8           # pass@k (default: samples)
//	}
type Settings struct {
	Holdout         []string
	HoldoutFraction float64
	Seed            int64
	Every           int
	Samples         int
	K               int
}

// Default is what a job without an eval block gets: no tasks held out, no
// evaluation during training, run.group_size episodes per task.
func Default(f *config.File) *Settings {
	return &Settings{Seed: f.Run.Seed, Samples: f.Run.GroupSize, K: f.Run.GroupSize}
}

// Decode reads the eval block of f (the defaults when it has none).
func Decode(f *config.File) (*Settings, hcl.Diagnostics) {
	s := Default(f)
	if f.Eval == nil {
		return s, nil
	}
	var b struct {
		Holdout         []string `hcl:"holdout,optional"`
		HoldoutFraction *float64 `hcl:"holdout_fraction,optional"`
		Seed            *int64   `hcl:"seed,optional"`
		Every           *int     `hcl:"every,optional"`
		Samples         *int     `hcl:"samples,optional"`
		K               *int     `hcl:"k,optional"`
	}
	diags := gohcl.DecodeBody(f.Eval.Body, f.EvalContext, &b)
	if diags.HasErrors() {
		return nil, diags
	}
	s.Holdout = b.Holdout
	set := func(dst *int, v *int) {
		if v != nil {
			*dst = *v
		}
	}
	set(&s.Every, b.Every)
	set(&s.Samples, b.Samples)
	s.K = s.Samples
	set(&s.K, b.K)
	if b.Seed != nil {
		s.Seed = *b.Seed
	}
	if b.HoldoutFraction != nil {
		s.HoldoutFraction = *b.HoldoutFraction
	}
	bad := func(attr, detail string) {
		diags = append(diags, attrDiag(f.Eval, attr, detail))
	}
	switch {
	case len(s.Holdout) > 0 && b.HoldoutFraction != nil:
		bad("holdout_fraction", "set holdout (task ids) or holdout_fraction, not both")
	case !(s.HoldoutFraction >= 0 && s.HoldoutFraction < 1) || math.IsNaN(s.HoldoutFraction):
		bad("holdout_fraction", fmt.Sprintf("holdout_fraction %g must be in [0, 1)", s.HoldoutFraction))
	}
	if s.Every < 0 {
		bad("every", fmt.Sprintf("every %d must be >= 0 (0: no evaluation during training)", s.Every))
	}
	if s.Samples < 1 {
		bad("samples", fmt.Sprintf("samples %d must be >= 1", s.Samples))
	}
	if s.K < 1 || s.K > s.Samples {
		bad("k", fmt.Sprintf("k %d must be in [1, samples = %d]", s.K, s.Samples))
	}
	if s.Every > 0 && !s.HoldsOut() {
		bad("every", "evaluating during training needs held-out tasks: set holdout or holdout_fraction")
	}
	return s, diags
}

// HoldsOut reports whether the settings hold tasks out of training.
func (s *Settings) HoldsOut() bool { return len(s.Holdout) > 0 || s.HoldoutFraction > 0 }

// Split divides an env's tasks into those training uses and those held
// out, keeping the env's order in both. A fraction holds out
// round(fraction × tasks) of them (at least one), chosen with the seed; at
// least one task must remain for training. Ids that name no task are an
// error.
func (s *Settings) Split(tasks []core.Task) (train, held []core.Task, err error) {
	if !s.HoldsOut() {
		return tasks, nil, nil
	}
	out := map[string]bool{}
	if len(s.Holdout) > 0 {
		have := map[string]bool{}
		for _, t := range tasks {
			have[t.ID] = true
		}
		var unknown []string
		for _, id := range s.Holdout {
			if !have[id] {
				unknown = append(unknown, fmt.Sprintf("%q", id))
			}
			out[id] = true
		}
		if len(unknown) > 0 {
			return nil, nil, fmt.Errorf("eval: holdout names tasks the env does not have: %s", strings.Join(unknown, ", "))
		}
	} else {
		n := max(1, int(math.Round(s.HoldoutFraction*float64(len(tasks)))))
		r := rand.New(rand.NewPCG(uint64(s.Seed), 0x686f6c646f7574)) // "holdout"
		for _, i := range r.Perm(len(tasks))[:min(n, len(tasks))] {
			out[tasks[i].ID] = true
		}
	}
	for _, t := range tasks {
		if out[t.ID] {
			held = append(held, t)
		} else {
			train = append(train, t)
		}
	}
	if len(train) == 0 {
		return nil, nil, fmt.Errorf("eval: every one of the env's %d tasks is held out; training needs at least one", len(tasks))
	}
	return train, held, nil
}

// Select returns the tasks of a task set: "heldout", "train" or "all".
func (s *Settings) Select(tasks []core.Task, set string) ([]core.Task, error) {
	train, held, err := s.Split(tasks)
	if err != nil {
		return nil, err
	}
	switch set {
	case "all":
		return tasks, nil
	case "train":
		return train, nil
	case "heldout":
		if len(held) == 0 {
			return nil, fmt.Errorf("eval: the job holds no tasks out (add holdout or holdout_fraction to its eval block, or use --tasks all)")
		}
		return held, nil
	}
	return nil, fmt.Errorf("eval: task set %q is not one of %s", set, strings.Join(TaskSets, ", "))
}

// TaskSets are the names Select accepts.
var TaskSets = []string{"heldout", "train", "all"}

// attrDiag points at attribute name of the eval block, or at the block.
func attrDiag(b *config.Eval, name, detail string) *hcl.Diagnostic {
	d := &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid eval setting", Detail: detail, Subject: b.DefRange.Ptr()}
	if attrs, diags := b.Body.JustAttributes(); !diags.HasErrors() {
		if a, ok := attrs[name]; ok {
			d.Subject = a.Expr.Range().Ptr()
		}
	}
	return d
}
