package coding

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/sdk/envplugin"
)

// staleCodeExit is loader.py's exit status when the interpreter is not
// the one that compiled the code.
const staleCodeExit = 86

// runnerCode is the trusted runner compiled once by the sandboxes'
// interpreter and kept for the run. An interpreter starting the runner
// from this bytecode (loader.py) spends about a third less CPU than one
// compiling its source on every completion. Any failure to get it falls
// back to the source, which is always correct, only slower.
type runnerCode struct {
	mu      sync.Mutex
	key     string // the interpreter and PATH it was compiled with
	version int    // the interpreter's sys.hexversion
	code    []byte // the marshalled code object
}

// get returns the compiled runner for s, compiling it in sb (where, like
// the reference, it runs before any candidate code) if this run has not
// yet; nil means: use the source.
func (c *runnerCode) get(ctx context.Context, s settings, sb envplugin.Sandbox) (int, []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := runnerKey(s)
	if c.key == key {
		return c.version, c.code
	}
	c.version, c.code = 0, nil
	res, err := sb.Exec(ctx, core.ExecRequest{
		Command:        []string{s.python, "-I", "-S", "-c", compilePy},
		Stdin:          []byte(runnerProgram),
		Env:            map[string]string{"PATH": s.path},
		Timeout:        30 * time.Second,
		MaxOutputBytes: 4 << 20,
	})
	if err != nil {
		return 0, nil // the sandbox failed, not the compiler: try again next time
	}
	// From here the outcome holds for the run: the code, or the source.
	c.key = key
	if res.TimedOut || res.ExitCode != 0 || res.OutputTruncated {
		return 0, nil
	}
	version, code, err := parseCompiled(res.Stdout)
	if err != nil {
		return 0, nil
	}
	c.version, c.code = version, code
	return version, code
}

// runnerKey names the interpreter the code is compiled with.
func runnerKey(s settings) string { return s.python + "\x00" + s.path }

// wanted reports whether the run has no compiled runner (nor its source
// chosen instead) for s yet.
func (c *runnerCode) wanted(s settings) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.key != runnerKey(s)
}

// offer keeps code a reference run compiled, in a sandbox no candidate had
// run in, unless the run has code for s already; out is what compile.py
// prints. Unreadable code is dropped and get compiles it apart.
func (c *runnerCode) offer(s settings, out string) {
	version, code, err := parseCompiled(out)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if key := runnerKey(s); c.key != key {
		c.key, c.version, c.code = key, version, code
	}
}

// forget drops the code (the interpreter changed under the run); the
// next completion compiles it again.
func (c *runnerCode) forget() {
	c.mu.Lock()
	c.key, c.version, c.code = "", 0, nil
	c.mu.Unlock()
}

// parseCompiled reads compile.py's output: the version, a space, the code
// in hex.
func parseCompiled(out string) (int, []byte, error) {
	v, h, ok := strings.Cut(strings.TrimSpace(out), " ")
	if !ok {
		return 0, nil, fmt.Errorf("compiled runner: no version")
	}
	version, err := strconv.Atoi(v)
	if err != nil || version <= 0 || version > 9999999999 {
		return 0, nil, fmt.Errorf("compiled runner: bad version %q", v)
	}
	code, err := hex.DecodeString(h)
	if err != nil || len(code) == 0 || len(code) > 9999999999 {
		return 0, nil, fmt.Errorf("compiled runner: bad code (%d hex digits)", len(h))
	}
	return version, code, nil
}

// loaderInput is what loader.py reads: the header, the code, the request.
func loaderInput(version int, code, request []byte) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%010d%010d", version, len(code))
	b.Write(code)
	b.Write(request)
	return b.Bytes()
}
