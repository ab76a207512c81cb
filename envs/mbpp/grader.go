package mbpp

// Grading design. The agent has had a shell in the sandbox for the whole
// episode, so anything on disk, anything in PATH, and any process it left
// running may be hostile by the time we score. The grader therefore:
//
//   - runs an interpreter resolved by absolute path before the agent acted,
//     with `-I -S` (no PYTHON* variables, no user site, no site.py, so no
//     sitecustomize or .pth files) and an explicit environment;
//   - never puts test code on disk: the trusted program and its job arrive on
//     stdin, generated fresh with a random nonce for every grading run;
//   - splits the trusted program from the agent's code: harness/grader.py
//     (trusted) parses each assertion, replaces the sub-expressions that need
//     the agent's code by holes, and runs harness/child.py (untrusted: it
//     forks one process per test that imports the solution) to evaluate only
//     those holes. The child returns plain data (numbers, strings and
//     containers of them, read with the builtin base type's own methods, so
//     no rigged __eq__ gets through); the trusted side evaluates the
//     assertion itself with the real builtins and math. An exit(0), a
//     monkeypatched builtin or a planted module can only make the child
//     report wrong values or none, which fails the test;
//   - reads verdicts only from stdout lines carrying the nonce, which agent
//     code never sees, and requires one per test plus a final "done".
//
// What it cannot defend against is an agent that can modify the interpreter
// or its standard library (root with isolation = "none"); the namespace
// isolation of the local backend keeps those read-only.

import (
	"bytes"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/sdk/envplugin"
)

//go:embed harness/grader.py
var graderSource string

//go:embed harness/child.py
var childSource string

// safePath is the PATH of every command the env runs; the host's PATH may
// contain shims that do not exist in sandboxes.
const safePath = "/usr/local/bin:/usr/bin:/bin"

// maxSource caps the solution file the grader reads.
const maxSource = 1 << 20

// gradeJob is what grader.py reads from its JOB_B64 line.
type gradeJob struct {
	Nonce        string   `json:"nonce"`
	SolutionPath string   `json:"solution_path"` // real path in the sandbox
	SolutionDir  string   `json:"solution_dir"`
	DisplayPath  string   `json:"display_path"` // what the agent calls it
	Tests        []string `json:"tests"`
	Setup        string   `json:"setup"`
	Child        string   `json:"child"`
	TestTimeout  float64  `json:"test_timeout"`
	MaxSource    int      `json:"max_source"`
}

// TestResult is the verdict on one test entry.
type TestResult struct {
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// GradeResult is the outcome of one grading run.
type GradeResult struct {
	Tests []TestResult
	// Broken is set when the grader did not report every test (killed,
	// timed out, interpreter gone): every test counts as failed.
	Broken string
}

// Passed reports whether every test passed.
func (g GradeResult) Passed() bool {
	if g.Broken != "" || len(g.Tests) == 0 {
		return false
	}
	for _, t := range g.Tests {
		if !t.OK {
			return false
		}
	}
	return true
}

// NumPassed counts passing tests.
func (g GradeResult) NumPassed() int {
	n := 0
	for _, t := range g.Tests {
		if t.OK && g.Broken == "" {
			n++
		}
	}
	return n
}

// gradeRequest builds the exec request for one grading run: the trusted
// program on stdin with a fresh nonce.
func gradeRequest(python, realSolution, displayPath string, tests []string, setup string, testTimeout time.Duration) (core.ExecRequest, string, error) {
	var nb [16]byte
	if _, err := rand.Read(nb[:]); err != nil {
		return core.ExecRequest{}, "", fmt.Errorf("grader nonce: %w", err)
	}
	nonce := hex.EncodeToString(nb[:])
	job := gradeJob{
		Nonce: nonce, SolutionPath: realSolution, SolutionDir: path.Dir(realSolution),
		DisplayPath: displayPath, Tests: tests, Setup: setup, Child: childSource,
		TestTimeout: testTimeout.Seconds(), MaxSource: maxSource,
	}
	raw, err := json.Marshal(job)
	if err != nil {
		return core.ExecRequest{}, "", fmt.Errorf("encode grader job: %w", err)
	}
	var prog bytes.Buffer
	prog.WriteString("JOB_B64 = \"")
	prog.WriteString(base64.StdEncoding.EncodeToString(raw))
	prog.WriteString("\"\n")
	prog.WriteString(graderSource)
	// Every test may use its full timeout, plus interpreter start-up.
	total := time.Duration(len(tests)+1)*testTimeout + 10*time.Second
	return core.ExecRequest{
		Command:        []string{python, "-I", "-S", "-"},
		Stdin:          prog.Bytes(),
		Env:            map[string]string{"PATH": safePath, "LANG": "C.UTF-8"},
		Timeout:        total,
		MaxOutputBytes: 4 << 20,
	}, nonce, nil
}

// parseGrade reads the nonce-prefixed verdict lines of a grading run.
func parseGrade(res core.ExecResult, nonce string, n int) GradeResult {
	g := GradeResult{Tests: make([]TestResult, n)}
	seen := make([]bool, n)
	done := false
	prefix := nonce + " "
	for _, line := range strings.Split(res.Stdout, "\n") {
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		var v struct {
			I      *int   `json:"i"`
			OK     bool   `json:"ok"`
			Detail string `json:"detail"`
			Done   bool   `json:"done"`
		}
		if err := json.Unmarshal([]byte(rest), &v); err != nil {
			g.Broken = "malformed grader line"
			continue
		}
		switch {
		case v.Done:
			done = true
		case v.I != nil && *v.I >= 0 && *v.I < n && !seen[*v.I]:
			seen[*v.I] = true
			g.Tests[*v.I] = TestResult{OK: v.OK, Detail: v.Detail}
		default:
			g.Broken = "unexpected grader line"
		}
	}
	for i, s := range seen {
		if !s && g.Broken == "" {
			g.Broken = fmt.Sprintf("no verdict for test %d", i)
		}
	}
	if !done && g.Broken == "" {
		g.Broken = "the grader did not finish"
	}
	if g.Broken != "" {
		why := g.Broken
		if res.TimedOut {
			why += " (timed out)"
		}
		if tail := strings.TrimSpace(res.Stderr); tail != "" {
			why += "\n" + tailString(tail, 1500)
		}
		g.Broken = why
	}
	return g
}

// grade runs the hidden tests against the solution in sb.
func grade(ctx context.Context, sb envplugin.Sandbox, rt runtimeInfo, cfg *config, p Problem) (GradeResult, error) {
	tests := append([]string(nil), p.TestList...)
	if cfg.IncludeChallengeTests {
		tests = append(tests, p.ChallengeTestList...)
	}
	setup := p.TestSetupCode
	if len(p.TestImports) > 0 {
		setup = strings.Join(p.TestImports, "\n") + "\n" + setup
	}
	req, nonce, err := gradeRequest(rt.python, rt.solution, cfg.SolutionPath, tests, setup, cfg.testTimeout)
	if err != nil {
		return GradeResult{}, err
	}
	if ownPIDNamespace(rt.isolation) {
		// A process the agent left running could race the grader for its
		// stdin (and so its nonce) through /proc. In a sandbox with its own
		// PID namespace, kill(-1) reaches exactly the sandbox's processes
		// (never its init); elsewhere it would reach the host's.
		kill := core.ExecRequest{Command: []string{"/bin/sh", "-c", "kill -KILL -1 2>/dev/null; exit 0"}, Env: map[string]string{"PATH": safePath}, Timeout: cfg.testTimeout}
		if _, err := sb.Exec(ctx, kill); err != nil {
			return GradeResult{}, fmt.Errorf("stop leftover processes in sandbox %s: %w", sb.ID(), err)
		}
	}
	res, err := sb.Exec(ctx, req)
	if err != nil {
		return GradeResult{}, fmt.Errorf("run grader in sandbox %s: %w", sb.ID(), err)
	}
	return parseGrade(res, nonce, len(tests)), nil
}

// ownPIDNamespace reports whether a sandbox of this isolation has a PID
// namespace of its own in which rlhost's init is PID 1: the local backend's
// "namespaces", also when it reports "namespaces (seccomp off)" (the
// filter is not what confines kill(-1)). Cloud sandboxes may run their
// provider's daemon beside the agent's processes, so they do not qualify.
func ownPIDNamespace(isolation string) bool {
	return isolation == "namespaces" || strings.HasPrefix(isolation, "namespaces (")
}

// tailString keeps the last n bytes of s, cut at a rune boundary.
func tailString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	for i := 0; i < len(s) && i < 4; i++ {
		if s[i]&0xC0 != 0x80 {
			return "[...]" + s[i:]
		}
	}
	return "[...]" + s
}
