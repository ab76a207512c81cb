// Package core holds the domain types that the host, the plugins and the
// trainer share: tasks, chat messages in OpenAI shape, tool specs, sandbox
// specs, exec requests and results, trajectories and metrics.
//
// It deliberately holds no behaviour beyond small helpers on these types; the
// plugin protocol lives in core/proto, and the SDKs for each plugin kind live
// in core/envplugin and core/sandboxplugin.
package core
