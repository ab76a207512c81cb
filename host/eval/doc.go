// Package eval measures policies on a job's tasks: it holds tasks out of
// training (the job's eval block), runs episodes of them against a policy
// through the job's own runner, and turns the trajectories into pass@1,
// pass@k, the mean reward with a 95% interval and a per-task table, and
// compares two policies with a test stratified by task. `rlhost eval` and
// a training run's periodic evaluation (Sink) use it.
//
// It trains nothing and writes nothing into a run's trajectories or
// metrics files other than the eval/* metrics the Sink adds; episodes are
// run by host/runner, policies built by host/policy and host/training.
package eval
