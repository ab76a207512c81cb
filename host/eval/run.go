package eval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/host/job"
	"github.com/rlhost/rlhost/host/policy"
)

// TrajectoriesFile holds the episodes of an evaluation, each with its
// policy's label in info.policy.
const TrajectoriesFile = "eval_trajectories.jsonl"

// Options configure Evaluate.
type Options struct {
	Specs   []Spec
	TaskSet string // heldout | train | all
	Samples int    // episodes per task
	K       int    // pass@k
	Open    OpenOptions
	// Progress hears a line as each policy starts and its result as it
	// ends; nil for none.
	Progress io.Writer
	Logger   hclog.Logger
}

// Evaluate runs Samples episodes of each task of the chosen set against
// each policy in turn, with the job's env and sandboxes, and returns the
// report: one Result per policy and, with two or more, each one's
// comparison with the first. The trajectories go to outDir/eval_trajectories.jsonl.
// A policy that cannot be opened, or whose every episode fails, stops the
// evaluation with an error.
func Evaluate(ctx context.Context, j *job.Job, s *Settings, outDir string, o Options) (*Report, error) {
	all, err := j.Env.LiveEnv().Tasks(ctx)
	if err != nil {
		return nil, fmt.Errorf("env %s: %w", j.File.Env().Name, err)
	}
	tasks, err := s.Select(all, o.TaskSet)
	if err != nil {
		return nil, err
	}
	rep := &Report{Job: j.File.Path, Env: j.File.Env().Name, TaskSet: o.TaskSet, Tasks: TaskIDs(tasks),
		Samples: o.Samples, K: o.K, StartedAt: time.Now().UTC()}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, fmt.Errorf("eval: %w", err)
	}
	tf, err := os.Create(filepath.Join(outDir, TrajectoriesFile))
	if err != nil {
		return nil, fmt.Errorf("eval: %w", err)
	}
	defer tf.Close()
	enc := json.NewEncoder(tf)
	for _, sp := range o.Specs {
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "evaluating %s: %d tasks x %d episodes\n", sp.Label, len(tasks), o.Samples)
		}
		res, trajs, err := evaluateOne(ctx, j, sp, tasks, o)
		if err != nil {
			return rep, err
		}
		for _, t := range trajs {
			t.Info["policy"] = sp.Label
			if err := enc.Encode(t); err != nil {
				return rep, fmt.Errorf("eval: %w", err)
			}
		}
		rep.Policies = append(rep.Policies, res)
		if o.Progress != nil {
			res.Render(o.Progress)
		}
	}
	for i := 1; i < len(rep.Policies); i++ {
		c := Compare(rep.Policies[0], rep.Policies[i])
		rep.Comparisons = append(rep.Comparisons, c)
		if o.Progress != nil {
			c.Render(o.Progress)
		}
	}
	return rep, nil
}

// ErrAllFailed is returned when every episode of a policy failed.
var ErrAllFailed = errors.New("every episode failed")

func evaluateOne(ctx context.Context, j *job.Job, sp Spec, tasks []core.Task, o Options) (Result, []core.Trajectory, error) {
	p, closePolicy, err := Open(ctx, j.File, sp, o.Open)
	if err != nil {
		return Result{}, nil, fmt.Errorf("policy %s: %w", sp.Label, err)
	}
	defer closePolicy()
	if c, ok := p.(policy.Checker); ok {
		notify := func(msg string) {
			if o.Progress != nil {
				fmt.Fprintf(o.Progress, "policy %s: %s\n", sp.Label, msg)
			}
		}
		if err := c.Check(ctx, notify); err != nil {
			return Result{}, nil, fmt.Errorf("policy %s: %w", sp.Label, err)
		}
	}
	r := j.Runner(nil)
	r.Policy, r.Logger = p, o.Logger
	start := time.Now()
	trajs := r.Episodes(ctx, 0, tasks, o.Samples)
	if err := ctx.Err(); err != nil {
		return Result{}, trajs, err
	}
	if err := r.Err(); err != nil {
		return Result{}, trajs, fmt.Errorf("policy %s: %w", sp.Label, err)
	}
	res := Summarize(sp.Label, sp.Kind+" "+sp.Source, tasks, trajs, o.K, time.Since(start))
	if res.Episodes > 0 && res.Errors == res.Episodes {
		first := ""
		for _, t := range trajs {
			if t.Error != "" {
				first = t.Error
				break
			}
		}
		return res, trajs, fmt.Errorf("policy %s: %w (%d of %d); the first error: %s", sp.Label, ErrAllFailed, res.Errors, res.Episodes, first)
	}
	return res, trajs, nil
}
