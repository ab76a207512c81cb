// Package pluginbase holds what every rlhost plugin kind shares: the
// go-plugin handshake, the plugin description, and the serve-side guard that
// ends a plugin whose host has died.
//
// Plugin authors normally use core/sdk/envplugin or core/sdk/sandboxplugin, which
// build on this package; it deliberately knows nothing about either kind.
package pluginbase

import (
	"github.com/hashicorp/go-plugin"

	"github.com/rlhost/rlhost/core/schema"
)

// ProtocolVersion is bumped on any incompatible change to core/sdk/wire/rlhostpb.
// 2: the lent sandbox is served as framed calls on one socket per env plugin
// process (NewEpisodeRequest.sandbox_socket, core/sdk/wire/frames), not as gRPC on
// a broker connection per episode; calls name their sandbox.
const ProtocolVersion = 2

// Plugin kinds, used as go-plugin plugin-map keys.
const (
	KindEnv     = "env"
	KindSandbox = "sandbox"
)

// HandshakeConfig is the go-plugin handshake every rlhost plugin uses. The
// cookie only stops people from running a plugin binary by hand by
// mistake; it is not a security measure. (A function, not a variable, so
// nothing can change it at run time.)
func HandshakeConfig() plugin.HandshakeConfig {
	return plugin.HandshakeConfig{
		ProtocolVersion:  ProtocolVersion,
		MagicCookieKey:   "RLHOST_PLUGIN",
		MagicCookieValue: "c1d2b6a4-rlhost-plugin-v1",
	}
}

// Info describes a plugin: what `rlhost plugins` prints and what the host
// decodes the plugin's HCL block against.
type Info struct {
	Name        string      `json:"name"`
	Version     string      `json:"version"`
	Kind        string      `json:"kind"`
	Description string      `json:"description,omitempty"`
	Config      schema.Spec `json:"config"`
	// NoSandbox, set by an environment, says its episodes run no commands:
	// a job needs no sandbox block for it, and Episode.Sandbox is nil.
	NoSandbox bool `json:"no_sandbox,omitempty"`
}
