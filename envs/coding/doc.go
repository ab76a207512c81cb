// Package coding is the single-shot code-writing environment: each episode
// poses one task ("write function f"), takes one assistant reply, extracts
// the Python code from it, runs it against the task's tests in the sandbox
// the host lent, and returns a reward (-1 for banned patterns, syntax errors,
// exceptions and timeouts; otherwise the fraction of tests passed).
//
// Expected outputs come from the task's trusted reference, run in its own
// process before any candidate code touches the sandbox, and are compared in
// Go; the candidate's process never sees them, and its stdout is not the
// channel the verdict travels on. The package deliberately does not manage
// sandboxes (the host lends one per episode) nor hold multi-turn state.
package coding
