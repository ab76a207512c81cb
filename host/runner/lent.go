package runner

import (
	"github.com/rlhost/rlhost/core/sdk/envplugin"
	"github.com/rlhost/rlhost/core/sdk/sandboxplugin"
)

// lentSandbox is the Sandbox an episode's environment sees: the sandbox
// block's bound sandbox, counting the execs the host relays, and the lease
// of a backend that lends its sandboxes itself (the env client then sends
// the env to the backend, and the host relays nothing).
type lentSandbox struct {
	sandboxplugin.Counted
	lease sandboxplugin.Lease
}

var _ envplugin.Sandbox = (*lentSandbox)(nil)

// Lease is the backend's lease of the sandbox; zero when it lends none.
func (s *lentSandbox) Lease() sandboxplugin.Lease { return s.lease }
