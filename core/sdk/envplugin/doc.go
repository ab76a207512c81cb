// Package envplugin is the SDK for environment plugins: the Environment and
// Session interfaces, Serve to run an environment as a plugin process, and
// the host-side client. The host lends each episode a Sandbox on a socket of
// its own (core/sdk/wire/lend), so an environment never talks to a backend
// directly; the plugin serves the host's episode calls on a socket of its
// own, with the same frames (episodes.go).
//
// Layout as in Nomad's plugins/drivers: env.go, plugin.go, client.go,
// server.go, episodes.go.
package envplugin
