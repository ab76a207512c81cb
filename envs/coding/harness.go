package coding

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"time"
)

// The Python side of scoring. jsonlite.py and encode.py are prepended to
// both programs, so reference and candidate outputs use the same encoder;
// child.py is part of the runner, which forks the candidate's process
// rather than starting a second interpreter.
var (
	//go:embed harness/jsonlite.py
	jsonlitePy string
	//go:embed harness/encode.py
	encodePy string
	//go:embed harness/reference.py
	referencePy string
	//go:embed harness/runner.py
	runnerPy string
	//go:embed harness/child.py
	childPy string
	//go:embed harness/loader.py
	loaderPy string
	//go:embed harness/compile.py
	compilePy string
)

// Each program is passed with -c and its input on stdin, so nothing is left
// on the sandbox's disk for the candidate to find.
var (
	referenceProgram = jsonlitePy + encodePy + referencePy
	runnerProgram    = jsonlitePy + encodePy + childPy + runnerPy
)

type referenceRequest struct {
	Reference string   `json:"reference"`
	FuncName  string   `json:"func_name"`
	Tests     []string `json:"tests"`
	// Compile is the runner's source when the run has no compiled runner
	// yet: the reference's interpreter compiles it (reference.py).
	Compile string `json:"compile,omitempty"`
}

type referenceReply struct {
	Values   []json.RawMessage `json:"values"`
	Path     []string          `json:"path"`     // the interpreter's sys.path under -I
	Compiled string            `json:"compiled"` // compile.py's output, when asked to compile
	Error    string            `json:"error"`
	Test     int               `json:"test"`
}

// runnerRequest is the trusted runner's input; Nonce tags its verdict line.
type runnerRequest struct {
	Nonce    string   `json:"nonce"`
	Code     string   `json:"code"`
	FuncName string   `json:"func_name"`
	Tests    []string `json:"tests"`
	Budget   float64  `json:"budget"` // seconds the runner gives the candidate
	ValueCap int      `json:"value_cap"`
	Path     []string `json:"path"` // added to the candidate's sys.path
}

// Verdict stages and per-test statuses, as runner.py writes them.
const (
	stageSyntax = "syntax"
	stageLoad   = "load"
	stageTests  = "tests"

	statusOK       = "ok"
	statusError    = "error"
	statusTimeout  = "timeout"
	statusCrash    = "crash"
	statusTooLarge = "too_large"
	statusBadReply = "bad_reply" // the candidate garbled its own reply pipe
	statusNotRun   = "not_run"
)

type verdict struct {
	Stage   string       `json:"stage"`
	Status  string       `json:"status"` // load stage: error, timeout, crash
	Error   string       `json:"error"`
	Results []testResult `json:"results"`
	Stderr  string       `json:"stderr"`
}

type testResult struct {
	Status string          `json:"status"`
	Value  json.RawMessage `json:"value"`
	Error  string          `json:"error"`
}

// runnerGrace is what the exec's limit adds to the candidate's time: room
// for the runner's own interpreter start-up and its verdict. The runner
// counts the candidate's budget (the env's timeout) from its own start, so a
// loaded machine that starts interpreters slowly does not fail correct code;
// the backend's limit is only the backstop for a runner that cannot finish
// (stopped, or starved by what the candidate spawned).
func runnerGrace(timeout time.Duration) time.Duration {
	return max(timeout, 2*time.Second)
}

// parseVerdict finds the single line of stdout that starts with the nonce.
// Anything else on stdout is ignored; a missing or repeated line is an error
// because it means something other than the runner wrote with the nonce or
// the runner never finished.
func parseVerdict(stdout, nonce string) (verdict, error) {
	prefix := []byte(nonce + " ")
	var found []byte
	n := 0
	for line := range bytes.Lines([]byte(stdout)) {
		if bytes.HasPrefix(line, prefix) {
			found = bytes.TrimSpace(line[len(prefix):])
			n++
		}
	}
	switch {
	case n == 0:
		return verdict{}, fmt.Errorf("no verdict from the runner")
	case n > 1:
		return verdict{}, fmt.Errorf("%d verdict lines from the runner", n)
	}
	var v verdict
	if err := json.Unmarshal(found, &v); err != nil {
		return verdict{}, fmt.Errorf("decode verdict: %w", err)
	}
	switch v.Stage {
	case stageSyntax, stageLoad, stageTests:
	default:
		return verdict{}, fmt.Errorf("verdict has unknown stage %q", v.Stage)
	}
	return v, nil
}
