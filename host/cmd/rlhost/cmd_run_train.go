package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/host/config"
	"github.com/rlhost/rlhost/host/eval"
	"github.com/rlhost/rlhost/host/job"
	"github.com/rlhost/rlhost/host/output"
	"github.com/rlhost/rlhost/host/runner"
	"github.com/rlhost/rlhost/host/training"
	"github.com/rlhost/rlhost/trainer/safetensors"
)

// trainSettings decodes the trainer block when the run trains: it has
// one and --dry-run is off. A resume needs one.
func (a *app) trainSettings(f *config.File, dryRun, resume bool) (*training.Settings, int) {
	if f.Trainer == nil || dryRun {
		if resume {
			a.errorf("--resume continues a training run, but this job has no trainer block (or --dry-run is set)")
			return nil, 2
		}
		return nil, 0
	}
	if pb := f.Policy(); pb != nil && pb.Provider != training.ProviderName && pb.Provider != training.VLLMProviderName {
		a.errorf("the trainer block trains the policy rlhost serves itself (provider = %q) or one served by vLLM (provider = %q), but policy %q is provider %q; add --dry-run to roll out and score only",
			training.ProviderName, training.VLLMProviderName, pb.Name, pb.Provider)
		return nil, 1
	}
	s, diags := training.Decode(f, training.PolicyTemperature(f), f.Run.Steps)
	printDiags(a.stderr, f, diags)
	if diags.HasErrors() {
		return nil, 1
	}
	return s, 0
}

// openPolicy builds the run's policy into j: a trainer's (the embedded
// server, or a vLLM server whose adapter it trains), whose engine it
// returns for the caller to close, or any other provider's.
func openPolicy(ctx context.Context, f *config.File, j *job.Job, o training.PolicyOptions) (*training.Engine, hcl.Diagnostics) {
	cfg, diags := job.PolicyConfig(f)
	if diags.HasErrors() {
		return nil, diags
	}
	if !training.Opens(cfg.Provider, o.Train) {
		p, d := job.NewPolicy(f)
		j.Policy = p
		return nil, d
	}
	eng, p, err := training.OpenPolicy(ctx, cfg, f.Dir, o)
	if err != nil {
		return nil, job.PolicyDiagnostics(f, err)
	}
	j.Policy = p
	return eng, nil
}

// resumeState is what --resume found in the run's directory.
type resumeState struct {
	checkpoint string
	state      training.RunState
	earlier    []core.StepMetrics
	ahead      []core.Trajectory // finished episodes of the steps still to run
	summary    *output.Summary   // the steps kept, for the runner to add to
}

// loadResume finds the newest complete checkpoint of dir and cuts the
// output files back to it, so the continued run writes what an
// uninterrupted one would have.
func loadResume(dir string, steps int) (resumeState, error) {
	ckpt, st, err := training.Latest(dir)
	if err != nil {
		return resumeState{}, fmt.Errorf("--resume %s: %w", dir, err)
	}
	if st.NextStep >= steps {
		return resumeState{checkpoint: ckpt, state: st}, nil
	}
	// The run's first start; a summary.json that is gone or unreadable
	// only costs the summary that date.
	prev, _ := output.ReadSummary(dir)
	res, err := training.TrimOutputs(dir, st)
	if err != nil {
		return resumeState{}, fmt.Errorf("--resume %s: %w", dir, err)
	}
	sum := output.Continued(prev, res.Metrics, time.Now().UTC())
	return resumeState{checkpoint: ckpt, state: st, earlier: res.Metrics, ahead: res.Ahead, summary: &sum}, nil
}

// warmup runs the trainer block's supervised warm-up before the first step
// and saves the model it made under outDir/warmup (outDir "": not saved),
// the starting point an evaluation compares the trained model with.
func (a *app) warmup(ctx context.Context, eng *training.Engine, s *training.Settings, seed int64, outDir string) error {
	samples, err := training.LoadWarmup(s.Warmup.File, eng.Tok)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "warmup: %d steps of %d transcripts from %s (%d transcripts)\n", s.Warmup.Steps, s.Warmup.BatchSize, s.Warmup.Source, len(samples))
	var first, last float64
	err = eng.Exclusive(ctx, func() error {
		var err error
		first, last, err = training.RunWarmup(ctx, eng.Model, s.GRPO, *s.Warmup, samples, uint64(seed), a.stdout)
		if err == nil && eng.Trainer != nil {
			eng.Trainer.ResetReference() // beta's KL is to the warmed-up model
		}
		return err
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "warmup done: loss %.3f -> %.3f\n", first, last)
	if outDir == "" {
		return nil
	}
	saved := filepath.Join(outDir, training.WarmupDir)
	if err := os.RemoveAll(saved); err != nil {
		return fmt.Errorf("save the warm-up's model: %w", err)
	}
	if err := eng.Exclusive(ctx, func() error { return eng.SaveModel(saved, safetensors.F32) }); err != nil {
		return fmt.Errorf("save the warm-up's model: %w", err)
	}
	return nil
}

// holdOut keeps the eval block's held-out tasks out of the run, and in a
// training run with eval.every set evaluates the policy on them every so
// many steps (after the training sink's update).
func (a *app) holdOut(ctx context.Context, r *runner.Runner, s *eval.Settings, training bool) int {
	if !s.HoldsOut() {
		return 0
	}
	held, err := eval.HeldOut(ctx, r.Env, s)
	if err != nil {
		a.errorf("%v", err)
		return 1
	}
	r.Env = eval.TrainingEnv{Env: r.Env, Settings: s}
	fmt.Fprintf(a.stdout, "held out of training: %d tasks (%s)\n", len(held), strings.Join(eval.TaskIDs(held), ", "))
	if training && s.Every > 0 {
		r.Sinks = append(r.Sinks, &eval.Sink{Runner: r, Settings: s, Tasks: held})
	}
	return 0
}
