// Package daytona is the Daytona cloud sandbox backend for rlhost: it
// implements sandboxplugin.Backend on top of the official Daytona Go SDK,
// so the same run file works on Daytona by switching backend = "local" to
// backend = "daytona".
//
// It owns what rlhost needs beyond the SDK: argv-exact exec with separate,
// capped stdout and stderr over Daytona's single-string execute API
// (exec.go), labels and a per-user crash record so sandboxes of dead runs
// are found and deleted (owner.go, on plugins/backendkit/procowner), and
// bounded retries over Daytona's errors (retry.go, on core/retry; create
// caps and pacing come from plugins/backendkit/pace).
//
// It deliberately does not build or manage snapshots, volumes, previews or
// sessions, and it does not reimplement any Daytona API call: every call
// goes through the SDK or its generated API clients.
package daytona
