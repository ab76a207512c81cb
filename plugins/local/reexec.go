package local

import (
	"fmt"
	"os"
)

// Reexec runs the sandbox init role when this process was started as one
// by the backend, and then exits; otherwise it returns false at once.
//
// Namespaces are set up in a freshly executed process, never from a
// goroutine of a running program: Go's runtime is multithreaded and
// setns/unshare affect only one thread. So every binary that embeds the
// backend (rlhost itself, and the test binaries of this package) must call
// Reexec first thing in main (or TestMain):
//
//	func main() {
//		if local.Reexec() {
//			return
//		}
//		...
//	}
func Reexec() bool {
	if os.Getenv(roleEnv) != "init" {
		return false
	}
	// The role variable must not reach sandboxed commands; they get only
	// the environment the config passes in.
	os.Clearenv()
	if err := initMain(); err != nil {
		fmt.Fprintf(os.Stderr, "rlhost sandbox init: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
	return true
}
