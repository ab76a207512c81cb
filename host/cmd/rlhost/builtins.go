package main

import (
	"fmt"
	"io"
	"sort"

	"github.com/rlhost/rlhost/core/sdk/envplugin"
	"github.com/rlhost/rlhost/core/sdk/pluginbase"
	"github.com/rlhost/rlhost/core/sdk/sandboxplugin"
	"github.com/rlhost/rlhost/envs/coding"
	"github.com/rlhost/rlhost/envs/mbpp"
	"github.com/rlhost/rlhost/host/pluginmgr"
	"github.com/rlhost/rlhost/plugins/aviato"
	"github.com/rlhost/rlhost/plugins/daytona"
	"github.com/rlhost/rlhost/plugins/local"
)

// builtinPluginArg is the hidden subcommand under which this binary serves
// its built-in plugins: `rlhost __plugin KIND NAME`.
const builtinPluginArg = pluginmgr.BuiltinArg

func builtinEnvs() map[string]func() envplugin.Environment {
	return map[string]func() envplugin.Environment{
		"coding": func() envplugin.Environment { return coding.New() },
		"mbpp":   func() envplugin.Environment { return mbpp.New() },
	}
}

func builtinBackends() map[string]func() sandboxplugin.Backend {
	return map[string]func() sandboxplugin.Backend{
		"local":   func() sandboxplugin.Backend { return local.New() },
		"daytona": func() sandboxplugin.Backend { return daytona.New() },
		"aviato":  func() sandboxplugin.Backend { return aviato.New() },
	}
}

func builtinNames() map[string][]string {
	out := map[string][]string{}
	for name := range builtinEnvs() {
		out[pluginbase.KindEnv] = append(out[pluginbase.KindEnv], name)
	}
	for name := range builtinBackends() {
		out[pluginbase.KindSandbox] = append(out[pluginbase.KindSandbox], name)
	}
	for _, names := range out {
		sort.Strings(names)
	}
	return out
}

// servePlugin runs one built-in plugin; go-plugin's handshake happens on
// stdout, so nothing else may be printed there.
func servePlugin(args []string, stderr io.Writer) int {
	if len(args) != 2 {
		fmt.Fprintln(stderr, "rlhost: internal: usage: rlhost __plugin KIND NAME")
		return 2
	}
	kind, name := args[0], args[1]
	switch kind {
	case pluginbase.KindEnv:
		if mk, ok := builtinEnvs()[name]; ok {
			envplugin.Serve(mk())
			return 0
		}
	case pluginbase.KindSandbox:
		if mk, ok := builtinBackends()[name]; ok {
			sandboxplugin.Serve(mk())
			return 0
		}
	}
	fmt.Fprintf(stderr, "rlhost: no built-in %s plugin %q\n", kind, name)
	return 2
}

// reexecHelper runs the local backend's sandbox helper when this process was
// re-executed as one; namespace setup must happen in a fresh process.
func reexecHelper() bool { return local.Reexec() }

func protocolVersion() int { return pluginbase.ProtocolVersion }
