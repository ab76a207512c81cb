package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rlhost/rlhost/host/eval"
	"github.com/rlhost/rlhost/host/job"
	"github.com/rlhost/rlhost/host/runner"
)

const evalUsage = `Usage: rlhost eval FILE.hcl [flags]

Runs the job's env against one or more policies, k episodes per task, and
reports pass@1 and pass@k (the unbiased estimator of Chen et al. 2021), the
mean reward with a 95% confidence interval, and a table per task, on the
terminal and in OUT/eval.json (OUT/eval_trajectories.jsonl holds the
episodes). With two or more policies, each is compared with the first: the
difference in mean reward and pass@1, paired by task, and whether it is
significant at 5% (docs/eval.md says how).

Every policy samples with the settings of the job's policy block
(temperature, top_p, max_tokens, stop). --policy takes [LABEL=]SOURCE:
  NAME                a policy block of the job file
  DIR                 a Hugging Face model directory, a training run's output
                      directory (its final/ model), a checkpoint
                      (checkpoints/step-N) or a LoRA adapter directory
  http(s)://HOST/v1   an OpenAI-compatible server; --model names its model
Without --policy, the job's own policy block is evaluated.

The tasks are the job's held-out tasks (its eval block's holdout or
holdout_fraction) when it has some, else all of them (--tasks).

Examples:
  rlhost eval examples/quickstart.hcl --policy runs/quickstart/warmup --policy runs/quickstart/final
  rlhost eval examples/mbpp.hcl --policy http://127.0.0.1:8000/v1 --model Qwen/Qwen2.5-7B-Instruct -k 4
`

func (a *app) cmdEval(ctx context.Context, args []string) int {
	fs := newFlagSet("eval", evalUsage, a)
	var cf commonFlags
	cf.add(fs)
	specs := fs.StringArray("policy", nil, "policy to evaluate, [LABEL=]SOURCE (repeatable; see above)")
	k := fs.IntP("k", "k", 0, "pass@k, and episodes per task unless --samples says more (default: the eval block's k, else run.group_size)")
	samples := fs.Int("samples", 0, "episodes per task, at least k (default: the eval block's samples, else k)")
	taskSet := fs.String("tasks", "", "which tasks: heldout, train or all (default: heldout when the job holds tasks out, else all)")
	outDir := fs.String("out", "", "directory for eval.json (default: the config's output.dir)")
	modelName := fs.String("model", "", "the model an http(s) --policy serves")
	apiKeyEnv := fs.String("api-key-env", "", "environment variable holding an http(s) --policy's API key")
	concurrency := fs.Int("concurrency", 0, "episodes in flight at once (default: run.concurrency)")
	if done, code := parse(fs, args); done {
		return code
	}
	f, code := a.loadConfig("eval", fs, &cf)
	if f == nil {
		return code
	}
	s, diags := eval.Decode(f)
	printDiags(a.stderr, f, diags)
	if diags.HasErrors() {
		return 1
	}
	switch {
	case *k < 0 || *samples < 0 || *concurrency < 0:
		a.errorf("-k, --samples and --concurrency must be positive")
		return 2
	case *k > 0 && *samples > 0 && *samples < *k:
		a.errorf("--samples %d is fewer than -k %d: pass@k needs at least k episodes per task", *samples, *k)
		return 2
	}
	if *k > 0 {
		s.K, s.Samples = *k, max(*k, *samples)
	} else if *samples > 0 {
		s.Samples, s.K = *samples, min(s.K, *samples)
	}
	if *taskSet == "" {
		*taskSet = "all"
		if s.HoldsOut() {
			*taskSet = "heldout"
		}
	} else if !slices.Contains(eval.TaskSets, *taskSet) {
		a.errorf("--tasks %q is not one of %s", *taskSet, strings.Join(eval.TaskSets, ", "))
		return 2
	}
	if *concurrency > 0 {
		f.Run.Concurrency = *concurrency
	}
	if len(*specs) == 0 {
		if pb := f.Policy(); pb != nil {
			*specs = []string{pb.Name}
		}
	}
	var parsed []eval.Spec
	for _, s := range *specs {
		sp, err := eval.ParseSpec(s, f)
		if err != nil {
			a.errorf("%v", err)
			return 2
		}
		if sp.Kind == eval.KindEndpoint && *modelName == "" {
			a.errorf("--policy %s is an endpoint: name the model it serves with --model", sp.Source)
			return 2
		}
		parsed = append(parsed, sp)
	}
	if len(parsed) == 0 {
		a.errorf("%s has no policy block; name one or more with --policy", f.Path)
		return 2
	}
	dir := f.Output.Dir
	if *outDir != "" {
		dir = *outDir
	}
	mgr, err := a.manager(cf.logLevel)
	if err != nil {
		a.errorf("%v", err)
		return 1
	}
	defer mgr.StopAll(context.WithoutCancel(ctx))
	j, diags := job.Prepare(ctx, f, mgr, job.Options{RunID: runner.RunID(f.Run.Name+"-eval", time.Now()), SkipPolicy: true})
	printDiags(a.stderr, f, diags)
	if diags.HasErrors() {
		return 1
	}
	defer j.Close(ctx)
	logger := a.logger(cf.logLevel)
	rep, err := eval.Evaluate(ctx, j, s, dir, eval.Options{Specs: parsed, TaskSet: *taskSet, Samples: s.Samples, K: s.K,
		Open: eval.OpenOptions{Model: *modelName, APIKeyEnv: *apiKeyEnv, Logger: logger}, Progress: a.stdout, Logger: logger})
	if err != nil {
		a.errorf("%v", err)
		if ctx.Err() != nil {
			return 130
		}
		return 1
	}
	path, err := rep.Write(dir)
	if err != nil {
		a.errorf("%v", err)
		return 1
	}
	fmt.Fprintf(a.stdout, "report: %s\n", path)
	return 0
}
