// Package sandboxinit is the process inside a local sandbox: the init that
// builds the sandbox's root view in fresh namespaces, runs as its PID 1,
// and serves exec and file requests from the backend; plus the wire
// protocol and the exec runner both sides share.
//
// It is kept apart from the backend (package local) so that a dedicated
// helper binary needs nothing else: few package inits means a fast start.
// It deliberately decides no policy: limits, paths and environments arrive
// fully resolved in Setup and ExecSpec.
package sandboxinit

import (
	"fmt"
	"os"
	"strings"
)

// Reexec runs the sandbox init role (RoleEnv=init) or the launcher role
// (RoleEnv=launcher) when this process was started as one, and then exits;
// otherwise it returns false at once.
func Reexec() bool {
	role := os.Getenv(RoleEnv)
	if role != "init" && role != LauncherRole {
		return false
	}
	netPrepared := os.Getenv(NetEnv) == NetPrepared
	// The role variable must not reach sandboxed commands; they get only
	// the environment the config passes in.
	os.Clearenv()
	run, name := func() error { return initMain(netPrepared) }, "init"
	if role == LauncherRole {
		run, name = launcherMain, "launcher"
	}
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "rlhost sandbox %s: %v\n", name, err)
		os.Exit(1)
	}
	os.Exit(0)
	return true
}

// unescapeMount decodes the octal escapes of a mountinfo path.
func unescapeMount(s string) string {
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}
