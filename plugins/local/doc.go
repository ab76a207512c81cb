// Package local is rlhost's embedded sandbox backend: sandboxes on this
// machine, isolated with Linux namespaces, cgroups and rlimits, or (when
// configured explicitly) run without any isolation.
//
// A namespaced sandbox is a long-lived init process (this same binary,
// re-executed through Reexec) inside fresh user, mount, PID, network, IPC
// and UTS namespaces. The backend talks to it over a socketpair; the init
// runs commands and file operations inside the sandbox's own root view (by
// default only the host's runtime: /usr, /lib*, a curated /etc, plus the
// configured mounts), so nothing a request names can resolve on the host.
// Commands run under a seccomp filter and in a child cgroup that carries
// the limits, with the init outside it. Sandboxes are recorded in a
// per-user state directory with lock files, so other processes can list,
// destroy and reap them.
//
// It deliberately does not pull images or emulate a VM; see
// docs/local-sandbox.md for the isolation model and its limits.
package local
