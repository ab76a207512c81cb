// Command oldproto is an environment plugin built against the previous
// plugin protocol: the host must refuse it at the handshake, naming both
// versions, rather than start episodes it would serve wrongly.
package main

import (
	"github.com/hashicorp/go-plugin"

	"github.com/rlhost/rlhost/core/sdk/envplugin"
	"github.com/rlhost/rlhost/core/sdk/pluginbase"
)

func main() {
	hs := pluginbase.HandshakeConfig()
	hs.ProtocolVersion = pluginbase.ProtocolVersion - 1
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: hs,
		Plugins:         map[string]plugin.Plugin{pluginbase.KindEnv: &envplugin.Plugin{}},
		GRPCServer:      plugin.DefaultGRPCServer,
	})
}
