// Package rundir reads the directory an `rlhost run` writes, while the run
// writes it or long after: metrics.jsonl and summary.json parsed whole,
// job.json and the trainer's settings on demand, and trajectories.jsonl as
// an index of byte offsets with the few fields a listing needs, extended
// as the file grows. An episode is read from disk only when it is shown or
// searched.
//
// It never writes, and it opens files only through an os.Root on the run
// directory, so no name it is given (or a symlink it meets) reaches a file
// outside. It deliberately does not render anything or know about HTTP.
package rundir
