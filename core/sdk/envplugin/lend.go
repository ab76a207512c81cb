package envplugin

import (
	"context"

	"github.com/hashicorp/go-hclog"

	"github.com/rlhost/rlhost/core/sdk/sandboxplugin"
	"github.com/rlhost/rlhost/core/sdk/wire/frames"
)

// newLender is the host side of lending sandboxes to one env plugin
// process: one socket from the first episode with a sandbox to the client's
// end (life), so an episode costs the plugin no new connection. A sandbox
// is on loan from its episode's start to its end: an env can reach the
// sandboxes of its own live episodes and nothing else. Calls carry no
// token the host checks (an older plugin sends none); the loan is the
// authority.
func newLender(life context.Context, log hclog.Logger) *sandboxplugin.LendSocket {
	return sandboxplugin.NewLendSocket(life, frames.HostLentSocket, false, log)
}
