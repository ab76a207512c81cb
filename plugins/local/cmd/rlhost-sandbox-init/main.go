// Command rlhost-sandbox-init is the init of local sandboxes, as a binary of
// its own. The local backend prefers it, when it lies next to the rlhost
// executable, over re-executing rlhost itself: it imports only the sandbox
// init, so it starts in a fraction of the time (no gRPC, HCL, ... package
// initialisation on every sandbox creation). Run by hand, it does nothing.
package main

import (
	"fmt"
	"os"

	"github.com/rlhost/rlhost/plugins/local/sandboxinit"
)

func main() {
	if sandboxinit.Reexec() {
		return
	}
	fmt.Fprintln(os.Stderr, "rlhost-sandbox-init: started by the rlhost local sandbox backend only")
	os.Exit(2)
}
