// Package output writes a run's results to its output directory:
// trajectories.jsonl (one line per finished episode), metrics.jsonl (one line
// per step) and summary.json (rewritten atomically after every step), and
// renders the one-line-per-step progress and the final human summary.
//
// The JSONL files are append-only and crash-safe: every line goes out in one
// write(2) on an O_APPEND descriptor, the step's batch is fsynced, and a
// partial last line left by a crash is cut off when the file is reopened.
// The package deliberately does not read results back for analysis, rotate
// files, or decide when a step ends; the runner calls it.
package output
