package local

import "github.com/rlhost/rlhost/plugins/local/sandboxinit"

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
//
// A binary that only needs to be the init can import the much smaller
// sandboxinit package instead (see cmd/rlhost-sandbox-init).
func Reexec() bool { return sandboxinit.Reexec() }
