package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/hashicorp/hcl/v2/gohcl"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/host/output"
	"github.com/rlhost/rlhost/host/policy"
	"github.com/rlhost/rlhost/host/runner"
	"github.com/rlhost/rlhost/host/training"
)

const trainUsage = `Usage: rlhost train FILE.hcl --trajectories FILE [flags]

Runs GRPO offline on recorded groups: each step of the trajectories file
(as rlhost run writes it) becomes one update of the model that the job's
policy block names (provider "embedded": model, or init with tokenizer),
with the settings of its trainer block. Every assistant turn must carry
the token ids and log-probs the server sampled (prompt_token_ids,
token_ids, logprobs), as rlhost's embedded server and vLLM with
return_token_ids provide; text alone is never retokenised to train on.

The trainer block's warm-up runs first, as in rlhost run, so the model
starts where the run that recorded the file started. Every step's episodes
are checked before anything is written: a file that cannot be trained on
leaves --out untouched.

Writes OUT/metrics.jsonl (one line per step, numbered as in the
trajectories file), checkpoints and the trained model in Hugging Face
layout under OUT/final.

Example (after make run, which writes runs/quickstart):
  rlhost train examples/quickstart.hcl --trajectories runs/quickstart/trajectories.jsonl --out runs/offline
`

func (a *app) cmdTrain(ctx context.Context, args []string) int {
	fs := newFlagSet("train", trainUsage, a)
	var cf commonFlags
	cf.add(fs)
	trajPath := fs.String("trajectories", "", "trajectories.jsonl to train on (required)")
	outDir := fs.String("out", "", "output directory (default: the config's output.dir with -offline appended)")
	overwrite := fs.Bool("overwrite", false, "replace the outputs of an earlier run in the output directory")
	if done, code := parse(fs, args); done {
		return code
	}
	f, code := a.loadConfig("train", fs, &cf)
	if f == nil {
		return code
	}
	if *trajPath == "" {
		a.errorf("--trajectories is required; see rlhost train --help")
		return 2
	}
	if f.Trainer == nil {
		a.errorf("%s has no trainer block to train with", f.Path)
		return 1
	}
	steps, err := readSteps(*trajPath)
	if err != nil {
		a.errorf("%v", err)
		return 1
	}
	// Each step must be trainable before anything is written.
	for _, trajs := range steps {
		if _, err := training.Samples(trajs); err != nil {
			a.errorf("%s: step %d: %v", *trajPath, trajs[0].Step, err)
			return 1
		}
	}
	settings, diags := training.Decode(f, training.PolicyTemperature(f), len(steps))
	printDiags(a.stderr, f, diags)
	if diags.HasErrors() {
		return 1
	}
	pb := f.Policy()
	var pcfg policy.Config
	if pb == nil || gohcl.DecodeBody(pb.Body, f.EvalContext, &pcfg).HasErrors() || pcfg.Provider != training.ProviderName {
		a.errorf("rlhost train trains the model of an embedded policy block (provider = %q, with model or init)", training.ProviderName)
		return 1
	}
	pcfg.Name = pb.Name
	src, err := training.SourceOf(pcfg, f.Dir)
	if err != nil {
		a.errorf("%v", err)
		return 1
	}
	dir := f.Output.Dir + "-offline"
	if *outDir != "" {
		dir = *outDir
	}
	old, err := existingOutputs(dir, *overwrite, false, "--out DIR or --overwrite")
	if err != nil {
		a.errorf("%v", err)
		return 1
	}
	if err := removeOutputs(dir, old); err != nil {
		a.errorf("%v", err)
		return 1
	}
	eng, err := training.Open(ctx, training.EngineOptions{Source: src, ModelName: pb.Name, Train: settings, NoServe: true})
	if err != nil {
		a.errorf("%v", err)
		return 1
	}
	defer eng.Close()
	// As in rlhost run: the recorded episodes were sampled from the model
	// after its warm-up, so training on them starts from there too.
	if settings.Warmup != nil {
		if err := a.warmup(ctx, eng, settings, f.Run.Seed, ""); err != nil {
			a.errorf("%v", err)
			if ctx.Err() != nil {
				return 130
			}
			return 1
		}
	}
	out, err := output.Open(dir)
	if err != nil {
		a.errorf("%v", err)
		return 1
	}
	defer out.Close()
	fmt.Fprintf(a.stdout, "training %s offline on %d recorded steps from %s -> %s\n", pb.Name, len(steps), *trajPath, dir)
	sink := training.NewSink(eng, settings, "offline", dir, 0, nil)
	sink.Title, sink.Logger = f.Run.Name+" (offline)", a.logger(cf.logLevel)
	for i, trajs := range steps {
		if ctx.Err() != nil {
			break
		}
		m := output.Aggregate("offline", i, trajs)
		if m.Extra == nil {
			m.Extra = map[string]float64{}
		}
		st := &runner.Step{Index: i, Trajectories: trajs, Metrics: &m}
		if err := sink.EndStep(ctx, st); err != nil {
			a.errorf("%v", err)
			return 1
		}
		if err := out.WriteStep(m); err != nil {
			a.errorf("%v", err)
			return 1
		}
		fmt.Fprintln(a.stdout, output.ProgressLine(m, len(steps)))
	}
	completed := ctx.Err() == nil
	if err := sink.Finish(completed); err != nil {
		a.errorf("%v", err)
		return 1
	}
	if !completed {
		fmt.Fprintf(a.stderr, "rlhost: interrupted; a checkpoint is in %s\n", filepath.Join(dir, training.CheckpointsDir))
		return 130
	}
	fmt.Fprintf(a.stdout, "final model: %s\n", filepath.Join(dir, training.FinalDir))
	return 0
}

// readSteps reads a trajectories file into its steps, in step order, each
// with its episodes by group and index.
func readSteps(path string) ([][]core.Trajectory, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	byStep := map[int][]core.Trajectory{}
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 1<<20), 256<<20)
	for n := 1; sc.Scan(); n++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var t core.Trajectory
		if err := json.Unmarshal(sc.Bytes(), &t); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		byStep[t.Step] = append(byStep[t.Step], t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(byStep) == 0 {
		return nil, fmt.Errorf("%s holds no trajectories", path)
	}
	var out [][]core.Trajectory
	for _, s := range slices.Sorted(maps.Keys(byStep)) {
		ts := byStep[s]
		slices.SortFunc(ts, func(a, b core.Trajectory) int {
			if a.Group != b.Group {
				return a.Group - b.Group
			}
			return a.Index - b.Index
		})
		out = append(out, ts)
	}
	return out, nil
}
