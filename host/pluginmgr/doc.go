// Package pluginmgr finds, starts, watches and stops rlhost plugins.
//
// Built-in plugins are served by re-executing the rlhost binary with a hidden
// subcommand, so users install one binary; external plugins are executables
// named by path or found in plugin directories. Loading is a linear pipeline
// (resolve, launch, handshake, describe, configure) and every error names the
// plugin and its path. A crashed plugin is restarted with backoff and
// re-configured; in-flight calls fail and their callers record that.
package pluginmgr
