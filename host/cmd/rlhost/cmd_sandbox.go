package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/spf13/pflag"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/duration"
	"github.com/rlhost/rlhost/core/sdk/wire/lend"
	"github.com/rlhost/rlhost/host/config"
	"github.com/rlhost/rlhost/host/job"
	"github.com/rlhost/rlhost/host/pluginmgr"
	"github.com/rlhost/rlhost/host/runner"
)

const sandboxUsage = `Usage: rlhost sandbox SUBCOMMAND [flags]

Subcommands:
  exec   run one command in a fresh sandbox and print the result
  list   list sandboxes (across processes), optionally by label
  rm     remove sandboxes by id, by label, or every orphan

Run 'rlhost sandbox SUBCOMMAND --help' for flags.
`

func (a *app) cmdSandbox(ctx context.Context, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(a.stdout, sandboxUsage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	switch args[0] {
	case "exec":
		return a.sandboxExec(ctx, args[1:])
	case "list", "ls":
		return a.sandboxList(ctx, args[1:])
	case "rm":
		return a.sandboxRm(ctx, args[1:])
	}
	a.errorf("unknown sandbox subcommand %q\n\n%s", args[0], sandboxUsage)
	return 2
}

// backendFlags pick the backend either from a config file's sandbox block
// or by built-in name with default settings.
type backendFlags struct {
	common  commonFlags
	cfgPath string
	sandbox string
	backend string
}

func (b *backendFlags) add(fs *pflag.FlagSet) {
	b.common.add(fs)
	fs.StringVar(&b.cfgPath, "config", "", "job file whose sandbox block to use")
	fs.StringVar(&b.sandbox, "sandbox", "", "sandbox block name in --config")
	fs.StringVar(&b.backend, "backend", "", "built-in backend with default settings (default local)")
}

func (a *app) startBackendFromFlags(ctx context.Context, b *backendFlags) (*pluginmgr.Manager, *pluginmgr.Instance, *config.Sandbox, int) {
	mgr, err := a.manager(b.common.logLevel)
	if err != nil {
		a.errorf("%v", err)
		return nil, nil, nil, 1
	}
	var f *config.File
	var sb *config.Sandbox
	if b.cfgPath != "" {
		if b.backend != "" {
			a.errorf("--config and --backend exclude each other")
			return nil, nil, nil, 2
		}
		vars, err := b.common.varMap()
		if err != nil {
			a.errorf("%v", err)
			return nil, nil, nil, 2
		}
		var diags hcl.Diagnostics
		f, diags = config.Load(b.cfgPath, vars)
		printDiags(a.stderr, f, diags)
		if diags.HasErrors() {
			return nil, nil, nil, 1
		}
		switch {
		case b.sandbox != "":
			sb = f.Sandbox(b.sandbox)
			if sb == nil {
				a.errorf("%s has no sandbox block named %q", b.cfgPath, b.sandbox)
				return nil, nil, nil, 1
			}
		case len(f.Sandboxes) == 1:
			sb = f.Sandboxes[0]
		default:
			a.errorf("%s has %d sandbox blocks; pick one with --sandbox NAME", b.cfgPath, len(f.Sandboxes))
			return nil, nil, nil, 2
		}
	} else {
		name := b.backend
		if name == "" {
			name = "local"
		}
		cwd, _ := os.Getwd()
		f = &config.File{Path: "(command line)", Dir: cwd, EvalContext: &hcl.EvalContext{}}
		sb = &config.Sandbox{Name: name, Backend: name, Body: hcl.EmptyBody(), ExecTimeout: config.DefaultExecTimeout, AttrRanges: map[string]hcl.Range{}}
	}
	in, diags := job.StartBackend(ctx, f, sb, mgr, fmt.Sprintf("cli-%d", os.Getpid()))
	printDiags(a.stderr, f, diags)
	if diags.HasErrors() {
		mgr.StopAll(context.WithoutCancel(ctx))
		return nil, nil, nil, 1
	}
	return mgr, in, sb, 0
}

const sandboxExecUsage = `Usage: rlhost sandbox exec [--config FILE --sandbox NAME | --backend local] [flags] -- CMD ARGS...

Creates a fresh sandbox, runs CMD in it, prints the result and destroys the
sandbox. Without --json, the command's stdout and stderr are copied through
and rlhost exits with the command's exit code (124 on timeout). With --json it
prints one object: exit_code, stdout, stderr, timed_out, duration_ms, and any
limit that was hit (oom_killed, pids_exceeded, cpu_time_exceeded,
output_truncated).
`

func (a *app) sandboxExec(ctx context.Context, args []string) int {
	fs := newFlagSet("sandbox exec", sandboxExecUsage, a)
	var b backendFlags
	b.add(fs)
	var timeout duration.Flag
	fs.Var(&timeout, "timeout", "wall-clock limit for the command, e.g. 30s or 30 (default: the block's timeout, else 30s)")
	asJSON := fs.Bool("json", false, "print one JSON object instead of the command's output")
	envs := fs.StringArray("env", nil, "environment variable for the command, NAME=VALUE (repeatable)")
	stdin := fs.Bool("stdin", false, "pass rlhost's standard input to the command")
	workdir := fs.String("workdir", "", "working directory inside the sandbox (default /workspace)")
	if done, code := parse(fs, args); done {
		return code
	}
	if fs.NArg() == 0 {
		a.errorf("sandbox exec needs a command after --; see rlhost sandbox exec --help")
		return 2
	}
	req := core.ExecRequest{Command: fs.Args(), Dir: *workdir, Env: map[string]string{}}
	for _, kv := range *envs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			a.errorf("--env %q: want NAME=VALUE", kv)
			return 2
		}
		req.Env[k] = v
	}
	if *stdin {
		data, err := io.ReadAll(a.stdin)
		if err != nil {
			a.errorf("read stdin: %v", err)
			return 1
		}
		req.Stdin = data
	}
	mgr, in, sb, code := a.startBackendFromFlags(ctx, &b)
	if code != 0 {
		return code
	}
	defer mgr.StopAll(context.WithoutCancel(ctx))
	req.Timeout = time.Duration(timeout) // 0: the block's, as an episode gets it
	backend, err := in.Backend(ctx)
	if err != nil {
		a.errorf("%v", err)
		return 125
	}
	spec := sb.Spec
	spec.Labels = map[string]string{}
	for k, v := range sb.Spec.Labels {
		spec.Labels[k] = v
	}
	spec.Labels[runner.LabelRun] = fmt.Sprintf("cli-exec-%d", os.Getpid())
	info, err := backend.Create(ctx, spec)
	if err != nil {
		a.errorf("%v", err)
		return 125
	}
	res, err := (&lend.Bound{Backend: backend, SandboxID: info.ID, DefaultTimeout: sb.ExecTimeout}).Exec(ctx, req)
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if derr := backend.Destroy(dctx, info.ID); derr != nil {
		a.errorf("warning: destroy sandbox %s: %v", info.ID, derr)
	}
	if err != nil {
		a.errorf("%v", err)
		return 125
	}
	if res.DurationMS == 0 {
		res.DurationMS = float64(res.Duration.Microseconds()) / 1000
	}
	if *asJSON {
		enc := json.NewEncoder(a.stdout)
		if err := enc.Encode(res); err != nil {
			a.errorf("%v", err)
			return 1
		}
		return 0
	}
	io.WriteString(a.stdout, res.Stdout)
	io.WriteString(a.stderr, res.Stderr)
	if hit := res.LimitHit(); hit != "" {
		fmt.Fprintf(a.stderr, "rlhost: limit hit: %s (exit code %d, %.1f ms)\n", hit, res.ExitCode, res.DurationMS)
	}
	if res.Isolation == "none" {
		fmt.Fprintln(a.stderr, "rlhost: note: this sandbox ran WITHOUT isolation (isolation = \"none\")")
	}
	switch {
	case res.TimedOut:
		return 124
	case res.ExitCode < 0:
		return 125
	case res.ExitCode > 255:
		return 255
	}
	return res.ExitCode
}

func parseLabels(kvs []string) (map[string]string, error) {
	m := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--label %q: want key=value", kv)
		}
		m[k] = v
	}
	return m, nil
}

const sandboxListUsage = `Usage: rlhost sandbox list [--backend local | --config FILE --sandbox NAME] [--label k=v]... [--json]

Lists the backend's sandboxes, including ones created by other rlhost
processes, filtered by labels. rlhost labels every sandbox with rlhost.run
(the run id), rlhost.env and rlhost.episode, plus the block's own labels.
`

func (a *app) sandboxList(ctx context.Context, args []string) int {
	fs := newFlagSet("sandbox list", sandboxListUsage, a)
	var b backendFlags
	b.add(fs)
	labels := fs.StringArray("label", nil, "only sandboxes with this label, key=value (repeatable)")
	asJSON := fs.Bool("json", false, "print JSON")
	if done, code := parse(fs, args); done {
		return code
	}
	want, err := parseLabels(*labels)
	if err != nil {
		a.errorf("%v", err)
		return 2
	}
	mgr, in, _, code := a.startBackendFromFlags(ctx, &b)
	if code != 0 {
		return code
	}
	defer mgr.StopAll(context.WithoutCancel(ctx))
	backend, err := in.Backend(ctx)
	if err != nil {
		a.errorf("%v", err)
		return 1
	}
	list, err := backend.List(ctx, want)
	if err != nil {
		a.errorf("%v", err)
		return 1
	}
	if *asJSON {
		if list == nil {
			list = []core.SandboxInfo{}
		}
		_ = json.NewEncoder(a.stdout).Encode(list)
		return 0
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tBACKEND\tSTATE\tCREATED\tLABELS")
	for _, s := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.ID, s.Backend, s.State, s.CreatedAt.Local().Format(time.DateTime), fmtLabels(s.Labels))
	}
	tw.Flush()
	return 0
}

func fmtLabels(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}

const sandboxRmUsage = `Usage: rlhost sandbox rm [--backend local | --config FILE --sandbox NAME] (ID... | --label k=v... | --orphans)

Removes sandboxes: the given ids, every sandbox carrying all the given labels,
or (--orphans) every sandbox whose owning rlhost process or run is gone.
`

func (a *app) sandboxRm(ctx context.Context, args []string) int {
	fs := newFlagSet("sandbox rm", sandboxRmUsage, a)
	var b backendFlags
	b.add(fs)
	labels := fs.StringArray("label", nil, "remove sandboxes with this label, key=value (repeatable)")
	orphans := fs.Bool("orphans", false, "remove sandboxes whose owner is gone")
	if done, code := parse(fs, args); done {
		return code
	}
	want, err := parseLabels(*labels)
	if err != nil {
		a.errorf("%v", err)
		return 2
	}
	modes := 0
	for _, on := range []bool{fs.NArg() > 0, len(want) > 0, *orphans} {
		if on {
			modes++
		}
	}
	if modes != 1 {
		a.errorf("sandbox rm takes exactly one of: sandbox ids, --label k=v, --orphans")
		return 2
	}
	mgr, in, _, code := a.startBackendFromFlags(ctx, &b)
	if code != 0 {
		return code
	}
	defer mgr.StopAll(context.WithoutCancel(ctx))
	backend, err := in.Backend(ctx)
	if err != nil {
		a.errorf("%v", err)
		return 1
	}
	if *orphans {
		removed, err := backend.ReapOrphans(ctx)
		for _, s := range removed {
			fmt.Fprintln(a.stdout, s.ID)
		}
		if err != nil {
			a.errorf("%v", err)
			return 1
		}
		fmt.Fprintf(a.stderr, "removed %d orphan sandboxes\n", len(removed))
		return 0
	}
	ids := fs.Args()
	if len(want) > 0 {
		list, err := backend.List(ctx, want)
		if err != nil {
			a.errorf("%v", err)
			return 1
		}
		for _, s := range list {
			ids = append(ids, s.ID)
		}
	}
	failed := 0
	for _, id := range ids {
		if err := backend.Destroy(ctx, id); err != nil {
			a.errorf("%v", err)
			failed++
			continue
		}
		fmt.Fprintln(a.stdout, id)
	}
	fmt.Fprintf(a.stderr, "removed %d sandboxes\n", len(ids)-failed)
	if failed > 0 {
		return 1
	}
	return 0
}
