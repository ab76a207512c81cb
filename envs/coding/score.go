package coding

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/sdk/envplugin"
)

// Penalty is the reward for a banned pattern, a syntax error, an exception
// or a timeout.
const Penalty = -1.0

// maxInfoText caps every text put into a trajectory's Info.
const maxInfoText = 2000

// outcome is the scored completion.
type outcome struct {
	reward  float64
	metrics map[string]float64
	info    map[string]string
	finish  string
}

func newOutcome(t taskConfig) *outcome {
	o := &outcome{metrics: map[string]float64{}, info: map[string]string{}, finish: core.FinishDone}
	if len(t.Tests) > 0 {
		o.metrics["tests_total"] = float64(len(t.Tests))
		o.metrics["tests_passed"] = 0
	}
	return o
}

// penalize sets the -1 reward, raises the metric flag that says why and
// records the error text.
func (o *outcome) penalize(flag, errText string) {
	o.reward = Penalty
	o.metrics[flag] = 1
	if errText != "" {
		o.info["error"] = capText(errText)
	}
	if flag == "timeout" {
		o.finish = core.FinishTimeout
	}
}

// refCache holds each task's expected outputs once computed. A task's
// outputs are a function of its reference and tests only, so they are keyed
// by those, computed in the first episode's sandbox before any candidate
// code ran there, and reused by every later episode.
type refCache struct {
	mu      sync.Mutex
	entries map[string]*refEntry
}

type refEntry struct {
	mu     sync.Mutex
	values []value
	sizes  []int    // encoded size of each expected value
	path   []string // the interpreter's absolute sys.path entries under -I
	done   bool
}

func (c *refCache) entry(t taskConfig) *refEntry {
	key, _ := json.Marshal(referenceRequest{Reference: t.Reference, FuncName: t.FuncName, Tests: t.Tests})
	sum := sha256.Sum256(key)
	k := hex.EncodeToString(sum[:])
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[string]*refEntry{}
	}
	e, ok := c.entries[k]
	if !ok {
		e = &refEntry{}
		c.entries[k] = e
	}
	return e
}

// expected returns the task's expected outputs, running the reference in sb
// if no earlier episode did. Failures are errors of the task, not of the
// completion, so they are returned rather than scored.
func (e *Env) expected(ctx context.Context, s settings, sb envplugin.Sandbox, t taskConfig) (*refEntry, error) {
	entry := e.refs.entry(t)
	entry.mu.Lock()
	defer entry.mu.Unlock()
	if entry.done {
		return entry, nil
	}
	req := referenceRequest{Reference: t.Reference, FuncName: t.FuncName, Tests: t.Tests}
	if e.runner.wanted(s) {
		// One interpreter start fewer per run than compiling apart.
		req.Compile = runnerProgram
	}
	stdin, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode reference request of task %s: %w", t.ID, err)
	}
	res, err := sb.Exec(ctx, core.ExecRequest{
		Command: []string{s.python, "-I", "-c", referenceProgram},
		Stdin:   stdin,
		Env:     map[string]string{"PATH": s.path},
		Timeout: s.referenceTimeout,
		// Expected outputs may be big; they never come from the candidate.
		MaxOutputBytes: 64 << 20,
	})
	if err != nil {
		return nil, fmt.Errorf("run reference of task %s: %w", t.ID, err)
	}
	if res.TimedOut || res.ExitCode != 0 || res.OutputTruncated {
		return nil, fmt.Errorf("reference of task %s failed (exit %d, limit %q): %s",
			t.ID, res.ExitCode, res.LimitHit(), capText(res.Stderr))
	}
	var reply referenceReply
	if err := json.Unmarshal([]byte(res.Stdout), &reply); err != nil {
		return nil, fmt.Errorf("decode reference output of task %s: %w", t.ID, err)
	}
	if reply.Error != "" {
		return nil, fmt.Errorf("reference of task %s: %s", t.ID, capText(reply.Error))
	}
	if len(reply.Values) != len(t.Tests) {
		return nil, fmt.Errorf("reference of task %s gave %d values for %d tests", t.ID, len(reply.Values), len(t.Tests))
	}
	values := make([]value, len(reply.Values))
	sizes := make([]int, len(reply.Values))
	for i, raw := range reply.Values {
		v, err := parseValue(raw)
		if err != nil {
			return nil, fmt.Errorf("reference of task %s, test %d: %w", t.ID, i, err)
		}
		if v.kind == "unsupported" {
			return nil, fmt.Errorf("reference of task %s, test %d returned an unsupported type %s", t.ID, i, v.text)
		}
		values[i], sizes[i] = v, len(raw)
	}
	// The runner starts with -I -S, so site-packages are not on its path;
	// the candidate gets them from here, as `python3 -I` would give them.
	var path []string
	for _, p := range reply.Path {
		if strings.HasPrefix(p, "/") {
			path = append(path, p)
		}
	}
	if reply.Compiled != "" {
		e.runner.offer(s, reply.Compiled)
	}
	entry.values, entry.sizes, entry.path, entry.done = values, sizes, path, true
	return entry, nil
}

// score runs one completion and computes its reward.
func (e *Env) score(ctx context.Context, s settings, sb envplugin.Sandbox, t taskConfig, completion string) (*outcome, error) {
	o := newOutcome(t)
	code, method := extract(completion, s.extract)
	o.info["extract"] = method
	if method == "" {
		o.info["extract"] = "none"
	}
	for _, p := range t.BannedPatterns {
		if strings.Contains(code, p) {
			o.info["banned_pattern"] = p
			o.penalize("banned", "banned pattern "+strconv.Quote(p))
			return o, nil
		}
	}
	if s.reward == RewardExec {
		return e.scoreExec(ctx, s, sb, code, o)
	}
	if code == "" {
		o.penalize("no_code", "no code found in the completion")
		return o, nil
	}
	ref, err := e.expected(ctx, s, sb, t)
	if err != nil {
		return nil, err
	}
	nonce, err := newNonce()
	if err != nil {
		return nil, err
	}
	valueCap, outCap := 0, 64<<10
	for _, n := range ref.sizes {
		valueCap = max(valueCap, 2*n)
		outCap += max(2*n, 64<<10) + 256
	}
	valueCap = max(valueCap, 64<<10)
	stdin, err := json.Marshal(runnerRequest{
		Nonce: nonce, Code: code, FuncName: t.FuncName, Tests: t.Tests,
		Budget: s.timeout.Seconds(), ValueCap: valueCap, Path: ref.path,
	})
	if err != nil {
		return nil, fmt.Errorf("encode runner request: %w", err)
	}
	run := core.ExecRequest{
		Command:        []string{s.python, "-I", "-S", "-c", runnerProgram},
		Stdin:          stdin,
		Env:            map[string]string{"PATH": s.path},
		Timeout:        s.timeout + runnerGrace(s.timeout),
		MaxOutputBytes: int64(outCap),
	}
	fromSource := run
	if version, code := e.runner.get(ctx, s, sb); code != nil {
		run.Command = []string{s.python, "-I", "-S", "-c", loaderPy}
		run.Stdin = loaderInput(version, code, stdin)
	}
	res, err := sb.Exec(ctx, run)
	if err == nil && res.ExitCode == staleCodeExit && strings.Contains(res.Stderr, "rlhost-runner-stale-code") {
		// Another interpreter than the one that compiled the code: the
		// loader stopped before anything ran; run from the source.
		e.runner.forget()
		res, err = sb.Exec(ctx, fromSource)
	}
	if err != nil {
		return nil, fmt.Errorf("run completion of task %s: %w", t.ID, err)
	}
	if res.TimedOut {
		o.penalize("timeout", "the runner did not finish within "+(s.timeout+runnerGrace(s.timeout)).String())
		return o, nil
	}
	v, err := parseVerdict(res.Stdout, nonce)
	if err != nil {
		// The runner is trusted, so a missing verdict means the candidate
		// broke it (killed it, flooded its output): fail closed.
		o.penalize("harness_error", fmt.Sprintf("%v (exit %d, limit %q): %s", err, res.ExitCode, res.LimitHit(), res.Stderr))
		return o, nil
	}
	if v.Stderr != "" {
		o.info["stderr"] = capText(v.Stderr)
	}
	applyVerdict(o, s, ref.values, v)
	return o, nil
}

// applyVerdict turns the runner's verdict into the reward. The rules:
// a syntax error, an exception while loading the module (including a
// missing function and SystemExit) and a timeout anywhere give -1; an
// exception inside a test call gives -1 under on_test_exception = "penalty"
// and fails just that test under "fail"; otherwise the reward is the
// fraction of tests whose return value equals the reference's.
func applyVerdict(o *outcome, s settings, want []value, v verdict) {
	switch v.Stage {
	case stageSyntax:
		o.penalize("syntax_error", v.Error)
		return
	case stageLoad:
		if v.Status == statusTimeout {
			o.penalize("timeout", "timed out while loading the module")
			return
		}
		o.penalize("load_error", v.Error)
		return
	}
	passed := 0
	var timedOut, raised bool
	var firstErr string
	for i, r := range v.Results {
		if i >= len(want) {
			break
		}
		ok := false
		switch r.Status {
		case statusOK:
			got, err := parseValue(r.Value)
			ok = err == nil && equal(want[i], got)
		case statusTimeout:
			timedOut = true
			firstErr = cmp.Or(firstErr, fmt.Sprintf("test %d: timed out", i))
		case statusError, statusCrash:
			raised = true
			firstErr = cmp.Or(firstErr, fmt.Sprintf("test %d: %s", i, r.Error))
		case statusTooLarge:
			firstErr = cmp.Or(firstErr, fmt.Sprintf("test %d: return value too large", i))
		case statusBadReply:
			firstErr = cmp.Or(firstErr, fmt.Sprintf("test %d: unreadable reply from the candidate process", i))
		}
		if r.Status == statusNotRun {
			continue
		}
		if ok {
			passed++
			o.metrics["test_"+strconv.Itoa(i)] = 1
		} else {
			o.metrics["test_"+strconv.Itoa(i)] = 0
		}
	}
	o.metrics["tests_passed"] = float64(passed)
	if firstErr != "" {
		o.info["error"] = capText(firstErr)
	}
	switch {
	case timedOut:
		o.penalize("timeout", firstErr)
	case raised && s.onException == OnExceptionPenalty:
		o.penalize("exception", firstErr)
	default:
		if raised {
			o.metrics["exception"] = 1
		}
		if len(want) > 0 {
			o.reward = float64(passed) / float64(len(want))
		}
	}
}

// scoreExec runs the code as a program: 1 if it exits 0 in time, else 0.
func (e *Env) scoreExec(ctx context.Context, s settings, sb envplugin.Sandbox, code string, o *outcome) (*outcome, error) {
	if code == "" {
		o.metrics["no_code"] = 1
		o.info["error"] = "no code found in the completion"
		return o, nil
	}
	if err := sb.WriteFile(ctx, "main.py", []byte(code), 0o644); err != nil {
		return nil, fmt.Errorf("write main.py: %w", err)
	}
	res, err := sb.Exec(ctx, core.ExecRequest{
		Command: []string{s.python, "-I", "main.py"},
		Env:     map[string]string{"PATH": s.path},
		Timeout: s.timeout,
	})
	if err != nil {
		return nil, fmt.Errorf("run main.py: %w", err)
	}
	o.metrics["exit_code"] = float64(res.ExitCode)
	switch {
	case res.TimedOut:
		o.metrics["timeout"] = 1
		o.finish = core.FinishTimeout
		o.info["error"] = "timed out after " + s.timeout.String()
	case res.ExitCode == 0:
		o.reward = 1
	default:
		o.info["error"] = capText(tail(res.Stderr))
	}
	return o, nil
}

func newNonce() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("make verdict nonce: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// capText keeps the start of s, which in Python tracebacks and our own
// messages is where the cause is named.
func capText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= maxInfoText {
		return s
	}
	return strings.ToValidUTF8(s[:maxInfoText], "") + "…"
}

// tail keeps the end of a Python traceback, where the exception is.
func tail(s string) string {
	if len(s) <= maxInfoText {
		return s
	}
	return strings.ToValidUTF8(s[len(s)-maxInfoText:], "")
}
