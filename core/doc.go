// Package core holds the domain types that the host, the plugins and the
// trainer share: tasks, chat messages in OpenAI shape, tool specs, sandbox
// specs, exec requests and results, trajectories and metrics.
//
// It deliberately holds no behaviour beyond small helpers on these types.
// What plugin authors import is under core/sdk: the SDK of each plugin kind
// (envplugin, sandboxplugin), and beneath them the protocol (sdk/wire).
package core
