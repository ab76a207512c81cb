// Package sandboxplugin is the SDK for sandbox backend plugins: the Backend
// interface a plugin implements, Serve to run it as a plugin process, and the
// host-side client that implements Backend over gRPC. A backend built on it
// lends the sandboxes the host asks it to (core/sdk/wire/lend) without a
// line of its own.
//
// It follows the layout of Nomad's plugins/drivers: backend.go (interface),
// plugin.go (go-plugin glue), client.go (host side), server.go (plugin side).
// It does not pick or isolate anything itself; that is each backend's job.
package sandboxplugin
