// Package config loads an rlhost job file (HCL): variables, the run block,
// sandbox, env and policy blocks, and the output block.
//
// It decodes only what the host itself understands. Each plugin-owned part of
// a block stays an hcl.Body until the plugin's schema is known, so every
// diagnostic, ours or the plugin's, keeps its file:line:col. It deliberately
// starts no plugin: see host/pluginmgr and host/job for that.
package config
