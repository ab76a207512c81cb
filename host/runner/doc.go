// Package runner runs a job's episodes: it samples tasks, creates one
// sandbox per episode, lends it to the environment, drives the multi-turn
// loop between policy and environment, and writes each trajectory the moment
// its episode ends.
//
// It owns no plugin processes (host/pluginmgr does) and no file formats
// (host/output does). Faults are recorded on the episode they hit; the run
// goes on.
package runner
