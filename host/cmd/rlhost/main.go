// Command rlhost runs reinforcement-learning jobs for LLM agents: it loads
// environments and sandbox backends as plugins, runs episodes, and writes
// trajectories and metrics. See `rlhost --help`.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/rlhost/rlhost/core/suggest"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

func main() {
	// A re-executed sandbox helper never returns from here.
	if reexecHelper() {
		return
	}
	if len(os.Args) > 1 && os.Args[1] == builtinPluginArg {
		os.Exit(servePlugin(os.Args[2:], os.Stderr))
	}
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// app carries the process's streams; commands write only through it.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
}

type command struct {
	name    string
	summary string
	run     func(a *app, ctx context.Context, args []string) int
	hidden  bool
}

func commands() []command {
	return []command{
		{name: "run", summary: "Run a job file: episodes in sandboxes, trajectories and metrics on disk", run: (*app).cmdRun},
		{name: "eval", summary: "Measure policies on a job's tasks: pass@1, pass@k, mean reward with confidence intervals, comparisons", run: (*app).cmdEval},
		{name: "train", summary: "Run GRPO offline on recorded trajectories (token ids and log-probs included)", run: (*app).cmdTrain},
		{name: "validate", summary: "Check a job file (and every plugin's settings) without running it", run: (*app).cmdValidate},
		{name: "plugins", summary: "List built-in and discovered plugins with versions and config schemas", run: (*app).cmdPlugins},
		{name: "ui", summary: "Serve a dashboard of runs in the browser: curves, health, settings, rollouts", run: (*app).cmdUI},
		{name: "sandbox", summary: "Run a command in a fresh sandbox, or list and remove sandboxes", run: (*app).cmdSandbox},
		{name: "model", summary: "Create, score with, sample from, merge and serve a model (Qwen2-family, HF layout)", run: (*app).cmdModel},
		{name: "tokenize", summary: "Encode or decode text with a tokenizer.json", run: (*app).cmdTokenize},
		{name: "version", summary: "Print the rlhost version", run: (*app).cmdVersion},
	}
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		a.usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == "--version" {
		args[0] = "version"
	}
	for _, c := range commands() {
		if c.name == args[0] {
			// The first Ctrl-C cancels ctx and the command cleans up; a
			// second one is handled by the command (see cmdRun) or kills us.
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return c.run(a, ctx, args[1:])
		}
	}
	var names []string
	for _, c := range commands() {
		if !c.hidden {
			names = append(names, c.name)
		}
	}
	if s := suggest.Closest(args[0], names); s != "" {
		fmt.Fprintf(stderr, "rlhost: unknown command %q; did you mean %q?\n\n", args[0], s)
	} else {
		fmt.Fprintf(stderr, "rlhost: unknown command %q\n\n", args[0])
	}
	a.usage(stderr)
	return 2
}

func (a *app) usage(w io.Writer) {
	fmt.Fprintf(w, "rlhost %s: run RL environments for LLM agents in sandboxes\n\nUsage:\n  rlhost COMMAND [flags]\n\nCommands:\n", version)
	for _, c := range commands() {
		if !c.hidden {
			fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
		}
	}
	fmt.Fprintf(w, "\nRun 'rlhost COMMAND --help' for a command's flags.\n\nQuick start:\n  rlhost run examples/quickstart.hcl          train a small model with GRPO on this CPU\n  rlhost run examples/coding.hcl --dry-run    score shipped completions, no training\n")
}

func (a *app) cmdVersion(_ context.Context, args []string) int {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
		fmt.Fprintln(a.stdout, "Usage: rlhost version\n\nPrints the rlhost version and the plugin protocol version.")
		return 0
	}
	fmt.Fprintf(a.stdout, "rlhost %s (plugin protocol %d)\n", version, protocolVersion())
	return 0
}

// errorf prints a one-line error in the CLI's voice.
func (a *app) errorf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	fmt.Fprintln(a.stderr, "rlhost: "+strings.TrimSpace(msg))
}
