// Package aviato is the Aviato (CoreWeave Sandbox) backend for rlhost: it
// implements sandboxplugin.Backend over the service's gRPC ATCService, so a
// run file moves from local sandboxes to Aviato by switching backend =
// "local" to backend = "aviato".
//
// The service's API comes from definitions recovered from the official
// Python client's descriptors (proto/, scripts/aviato). On top of it this
// package adds what rlhost needs: argv-exact exec with the request's env,
// directory, stdin and capped stdout/stderr (exec.go), labels as tags, a
// per-user record of owners so the sandboxes of a dead host are found by
// their owner tags and deleted (state.go), paced creates and bounded retries
// (retry.go), and the mapping of the service's status codes onto rlhost's
// error kinds.
//
// It deliberately does not stream logs or exec, pause, resume, snapshot, or
// manage secrets, mounts, ports or GPUs.
package aviato
