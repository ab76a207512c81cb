package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/core/sdk/pluginbase"
	"github.com/rlhost/rlhost/host/pluginmgr"
)

const pluginsUsage = `Usage: rlhost plugins [flags]

Lists the built-in plugins and the external ones found in $RLHOST_PLUGIN_PATH
and ~/.rlhost/plugins (executables named rlhost-env-NAME or rlhost-sandbox-NAME),
with their versions and the settings each accepts in its HCL block. Every
plugin is started to ask it, so a broken one shows up here.
`

type pluginRow struct {
	Source string          `json:"source"`
	Info   pluginbase.Info `json:"info"`
	Error  string          `json:"error,omitempty"`
}

func (a *app) cmdPlugins(ctx context.Context, args []string) int {
	fs := newFlagSet("plugins", pluginsUsage, a)
	asJSON := fs.Bool("json", false, "print JSON")
	logLevel := fs.String("log-level", envOr("RLHOST_LOG", "warn"), "log level")
	if done, code := parse(fs, args); done {
		return code
	}
	mgr, err := a.manager(*logLevel)
	if err != nil {
		a.errorf("%v", err)
		return 1
	}
	var rows []pluginRow
	failed := false
	for _, kind := range []string{pluginbase.KindEnv, pluginbase.KindSandbox} {
		var srcs []pluginmgr.Source
		for _, name := range mgr.Builtins(kind) {
			src, err := mgr.Resolve(kind, name, ".")
			if err == nil {
				srcs = append(srcs, src)
			}
		}
		srcs = append(srcs, mgr.Discover(kind)...)
		for _, src := range srcs {
			info, err := mgr.Probe(ctx, src)
			row := pluginRow{Source: src.String(), Info: info}
			if err != nil {
				row.Error = err.Error()
				row.Info.Name, row.Info.Kind = src.Name, kind
				failed = true
			}
			rows = append(rows, row)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rows)
	} else {
		for _, r := range rows {
			printPlugin(a, r)
		}
	}
	if failed {
		return 1
	}
	return 0
}

func printPlugin(a *app, r pluginRow) {
	fmt.Fprintf(a.stdout, "%s %s %s  [%s]\n", r.Info.Kind, r.Info.Name, r.Info.Version, r.Source)
	if r.Error != "" {
		fmt.Fprintf(a.stdout, "  ERROR: %s\n\n", r.Error)
		return
	}
	if r.Info.Description != "" {
		fmt.Fprintf(a.stdout, "  %s\n", r.Info.Description)
	}
	printSpec(a, r.Info.Config, "  ")
	fmt.Fprintln(a.stdout)
}

func printSpec(a *app, s schema.Spec, indent string) {
	for _, at := range s.Attributes {
		var notes []string
		if at.Required {
			notes = append(notes, "required")
		}
		if len(at.Default) > 0 && !at.Sensitive {
			notes = append(notes, "default "+string(at.Default))
		}
		if at.Sensitive {
			notes = append(notes, "sensitive")
		}
		note := ""
		if len(notes) > 0 {
			note = " (" + strings.Join(notes, ", ") + ")"
		}
		fmt.Fprintf(a.stdout, "%s%-22s %-14s %s%s\n", indent, at.Name, at.Type.FriendlyName(), at.Description, note)
	}
	for _, b := range s.Blocks {
		fmt.Fprintf(a.stdout, "%s%s { ... }  block, %s: %s\n", indent, b.Name, b.Nesting, b.Description)
		printSpec(a, b.Spec, indent+"  ")
	}
}
