package mbpp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/sdk/envplugin"
)

// toolSpecs returns the OpenAI function tools for the configured names.
func ToolSpecs(names []string) []core.ToolSpec {
	defs := map[string]core.FunctionSpec{
		ToolBash: {
			Name:        ToolBash,
			Description: "Run a bash command in the workspace and return its exit code, stdout and stderr. Each call starts a fresh shell; files persist.",
			Parameters:  json.RawMessage(`{"type":"object","properties":{"command":{"type":"string","description":"The bash command to run."}},"required":["command"],"additionalProperties":false}`),
		},
		ToolReadFile: {
			Name:        ToolReadFile,
			Description: "Read a text file in the workspace.",
			Parameters:  json.RawMessage(`{"type":"object","properties":{"path":{"type":"string","description":"File path, absolute or relative to the workspace."}},"required":["path"],"additionalProperties":false}`),
		},
		ToolWriteFile: {
			Name:        ToolWriteFile,
			Description: "Create or overwrite a file in the workspace with the given content.",
			Parameters:  json.RawMessage(`{"type":"object","properties":{"path":{"type":"string","description":"File path, absolute or relative to the workspace."},"content":{"type":"string","description":"The complete new content of the file."}},"required":["path","content"],"additionalProperties":false}`),
		},
	}
	out := make([]core.ToolSpec, 0, len(names))
	for _, n := range names {
		out = append(out, core.ToolSpec{Type: "function", Function: defs[n]})
	}
	return out
}

// toolRunner executes tool calls in one episode's sandbox. Every failure the
// model caused becomes text it can read; only a broken sandbox or a
// cancelled context is returned as an error.
type toolRunner struct {
	cfg *config
	sb  envplugin.Sandbox
}

// toolOutcome is one tool call's result.
type toolOutcome struct {
	content string
	failed  bool // the call did not do what was asked (bad args, timeout, ...)
}

func (r toolRunner) call(ctx context.Context, tc core.ToolCall) (toolOutcome, error) {
	name := tc.Function.Name
	if !slices.Contains(r.cfg.Tools, name) {
		return toolOutcome{fmt.Sprintf("Error: unknown tool %q. Available tools: %s.", name, strings.Join(r.cfg.Tools, ", ")), true}, nil
	}
	args, err := parseArgs(name, tc.Function.Arguments)
	if err != nil {
		return toolOutcome{"Error: " + err.Error(), true}, nil
	}
	switch name {
	case ToolBash:
		return r.bash(ctx, args["command"])
	case ToolReadFile:
		return r.readFile(ctx, args["path"])
	default:
		return r.writeFile(ctx, args["path"], args["content"])
	}
}

// toolParams lists each tool's (all required, all string) parameters.
var toolParams = map[string][]string{
	ToolBash:      {"command"},
	ToolReadFile:  {"path"},
	ToolWriteFile: {"path", "content"},
}

// parseArgs decodes a tool call's raw JSON arguments, with messages written
// for the model: what was wrong and what was expected.
func parseArgs(tool, raw string) (map[string]string, error) {
	want := toolParams[tool]
	usage := fmt.Sprintf("%s expects a JSON object with string fields %s", tool, strings.Join(want, ", "))
	if !json.Valid([]byte(raw)) {
		var probe any
		err := json.Unmarshal([]byte(raw), &probe)
		return nil, fmt.Errorf("the arguments of %s are not valid JSON (%v); %s", tool, err, usage)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("the arguments of %s must be a JSON object; %s", tool, usage)
	}
	out := make(map[string]string, len(want))
	for _, k := range want {
		v, ok := obj[k]
		if !ok {
			return nil, fmt.Errorf("missing argument %q; %s", k, usage)
		}
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return nil, fmt.Errorf("argument %q must be a string; %s", k, usage)
		}
		out[k] = s
	}
	for k := range obj {
		if _, ok := out[k]; !ok {
			return nil, fmt.Errorf("unexpected argument %q; %s", k, usage)
		}
	}
	return out, nil
}

func (r toolRunner) bash(ctx context.Context, command string) (toolOutcome, error) {
	res, err := r.sb.Exec(ctx, core.ExecRequest{
		// No Env: the agent's shell gets the sandbox's own environment (the
		// operator's PATH, venv, ...); only the grader pins its PATH.
		Command:        []string{"/bin/bash", "-c", command},
		Timeout:        r.cfg.bashTimeout,
		MaxOutputBytes: int64(r.cfg.ToolOutputCap) + 1,
	})
	if err != nil {
		if ctx.Err() != nil {
			return toolOutcome{}, ctx.Err()
		}
		return toolOutcome{}, fmt.Errorf("bash tool: %w", err)
	}
	var b strings.Builder
	failed := false
	switch {
	case res.TimedOut:
		fmt.Fprintf(&b, "Error: command timed out after %s\n", r.cfg.bashTimeout)
		failed = true
	case res.LimitHit() != "" && res.LimitHit() != "output_truncated":
		fmt.Fprintf(&b, "Error: command stopped: %s\n", strings.ReplaceAll(res.LimitHit(), "_", " "))
		failed = true
	}
	fmt.Fprintf(&b, "exit_code: %d\n", res.ExitCode)
	fmt.Fprintf(&b, "stdout:\n%s\n", res.Stdout)
	fmt.Fprintf(&b, "stderr:\n%s", res.Stderr)
	out := truncate(b.String(), r.cfg.ToolOutputCap)
	if res.OutputTruncated && !strings.Contains(out, truncMarker) {
		out += "\n" + truncMarker + " (the sandbox stopped capturing output)]"
	}
	return toolOutcome{out, failed}, nil
}

func (r toolRunner) readFile(ctx context.Context, p string) (toolOutcome, error) {
	rel, err := r.cfg.workspaceRel(p)
	if err != nil {
		return toolOutcome{"Error: " + err.Error(), true}, nil
	}
	data, err := r.sb.ReadFile(ctx, rel, int64(r.cfg.ToolOutputCap)+1)
	if err != nil {
		return fileError(ctx, "read", p, err)
	}
	if !utf8.Valid(data) && bytes.IndexByte(data, 0) >= 0 {
		return toolOutcome{fmt.Sprintf("Error: %s is a binary file", p), true}, nil
	}
	return toolOutcome{truncate(string(data), r.cfg.ToolOutputCap), false}, nil
}

func (r toolRunner) writeFile(ctx context.Context, p, content string) (toolOutcome, error) {
	rel, err := r.cfg.workspaceRel(p)
	if err != nil {
		return toolOutcome{"Error: " + err.Error(), true}, nil
	}
	if rel == "." {
		return toolOutcome{fmt.Sprintf("Error: %s is a directory", p), true}, nil
	}
	if err := r.sb.WriteFile(ctx, rel, []byte(content), 0o644); err != nil {
		return fileError(ctx, "write", p, err)
	}
	return toolOutcome{fmt.Sprintf("Wrote %d bytes to %s", len(content), p), false}, nil
}

// fileError turns a sandbox file error into text for the model.
func fileError(ctx context.Context, op, p string, err error) (toolOutcome, error) {
	if ctx.Err() != nil {
		return toolOutcome{}, ctx.Err()
	}
	var msg string
	switch {
	case errors.Is(err, core.ErrNotFound):
		msg = fmt.Sprintf("Error: no such file or directory: %s", p)
	case errors.Is(err, core.ErrInvalidPath):
		msg = fmt.Sprintf("Error: %s is outside the workspace", p)
	case errors.Is(err, core.ErrTooLarge):
		msg = fmt.Sprintf("Error: %s is too large", p)
	case errors.Is(err, core.ErrUnavailable):
		return toolOutcome{}, fmt.Errorf("%s %s: %w", op, p, err)
	default:
		msg = fmt.Sprintf("Error: could not %s %s: %v", op, p, err)
	}
	return toolOutcome{msg, true}, nil
}

const truncMarker = "[... output truncated"

// truncate caps s at n bytes, keeping its head and tail (errors are usually
// at the end), with a marker saying how much was cut. It never splits a
// UTF-8 sequence and always returns valid UTF-8.
func truncate(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	marker := fmt.Sprintf("\n%s: %d of %d bytes omitted ...]\n", truncMarker, 0, len(s))
	keep := n - len(marker) - 8 // room for the real count's digits
	if keep < 0 {
		keep = 0
	}
	head := cutRunes(s, keep*2/3, false)
	tail := cutRunes(s, keep-len(head), true)
	omitted := len(s) - len(head) - len(tail)
	return head + fmt.Sprintf("\n%s: %d of %d bytes omitted ...]\n", truncMarker, omitted, len(s)) + tail
}

// cutRunes returns at most n bytes from the start (or end) of s without
// splitting a rune.
func cutRunes(s string, n int, fromEnd bool) string {
	if n <= 0 {
		return ""
	}
	if n >= len(s) {
		return s
	}
	if !fromEnd {
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		return s[:n]
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}
