package pluginmgr

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// A plugin that dies before its handshake must end in one message that
// leads with what the plugin itself said: go-plugin's own account ("Failed
// to read any lines from plugin's stdout ... not compiled for this
// architecture") names none of it, and relays the plugin's stderr as log
// entries that a default log level hides or that say it twice. So while a
// plugin starts, its log entries are held (startGate) and its last stderr
// lines kept (stderrTail); a failed start turns them into the error
// (startError) and the held entries go to the debug level.

// tailLines bounds what stderrTail keeps, and tailLineBytes each line.
const (
	tailLines     = 40
	tailLineBytes = 1000
)

// stderrTail keeps the last lines a plugin wrote to stderr. go-plugin
// writes each line to it, without its newline, then a newline.
type stderrTail struct {
	mu    sync.Mutex
	lines []string
	cur   strings.Builder
}

func (t *stderrTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, b := range p {
		if b == '\n' {
			t.lines = append(t.lines, t.cur.String())
			if len(t.lines) > tailLines {
				t.lines = t.lines[len(t.lines)-tailLines:]
			}
			t.cur.Reset()
			continue
		}
		if t.cur.Len() < tailLineBytes {
			t.cur.WriteByte(b)
		}
	}
	return len(p), nil
}

// Lines returns what was kept, oldest first.
func (t *stderrTail) Lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := append([]string(nil), t.lines...)
	if t.cur.Len() > 0 {
		out = append(out, t.cur.String())
	}
	return out
}

// startGate holds the log entries of a plugin that is starting, until
// release says whether the start worked: then they are printed as they
// came, or at the debug level when the start failed (its error says what
// they said). Loggers derived with Named, ResetNamed and With share it.
type startGate struct {
	hclog.Logger
	*held
}

type held struct {
	mu      sync.Mutex
	holding bool
	entries []heldEntry
}

type heldEntry struct {
	to    hclog.Logger
	level hclog.Level
	msg   string
	args  []any
}

func newStartGate(l hclog.Logger) *startGate {
	return &startGate{Logger: l, held: &held{holding: true}}
}

// release ends the holding, printing what was held, at the debug level
// when failed.
func (h *held) release(failed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.holding {
		return
	}
	h.holding = false
	for _, e := range h.entries {
		lvl := e.level
		if failed && lvl > hclog.Debug {
			lvl = hclog.Debug
		}
		emit(e.to, lvl, e.msg, e.args)
	}
	h.entries = nil
}

// emit calls the method of the level, not Log: the stack joiner below
// gathers crash traces from Error calls.
func emit(l hclog.Logger, lvl hclog.Level, msg string, args []any) {
	switch lvl {
	case hclog.Trace:
		l.Trace(msg, args...)
	case hclog.Debug:
		l.Debug(msg, args...)
	case hclog.Info:
		l.Info(msg, args...)
	case hclog.Warn:
		l.Warn(msg, args...)
	default:
		l.Error(msg, args...)
	}
}

func (g *startGate) put(lvl hclog.Level, msg string, args []any) {
	g.mu.Lock()
	if g.holding {
		g.entries = append(g.entries, heldEntry{to: g.Logger, level: lvl, msg: msg, args: args})
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	emit(g.Logger, lvl, msg, args)
}

func (g *startGate) Log(level hclog.Level, msg string, args ...any) { g.put(level, msg, args) }
func (g *startGate) Trace(msg string, args ...any)                  { g.put(hclog.Trace, msg, args) }
func (g *startGate) Debug(msg string, args ...any)                  { g.put(hclog.Debug, msg, args) }
func (g *startGate) Info(msg string, args ...any)                   { g.put(hclog.Info, msg, args) }
func (g *startGate) Warn(msg string, args ...any)                   { g.put(hclog.Warn, msg, args) }
func (g *startGate) Error(msg string, args ...any)                  { g.put(hclog.Error, msg, args) }

func (g *startGate) Named(name string) hclog.Logger {
	return &startGate{Logger: g.Logger.Named(name), held: g.held}
}

func (g *startGate) ResetNamed(name string) hclog.Logger {
	return &startGate{Logger: g.Logger.ResetNamed(name), held: g.held}
}

func (g *startGate) With(args ...any) hclog.Logger {
	return &startGate{Logger: g.Logger.With(args...), held: g.held}
}

// startError is the one message for a plugin whose handshake failed: what
// the plugin last wrote to stderr, then what happened and what ran it.
// hsErr is go-plugin's error; state is the process's, once reaped.
func startError(src Source, hsErr error, stderr []string, state *os.ProcessState) error {
	const unrecognised = "Unrecognized remote plugin message: "
	msg := hsErr.Error()
	var what string
	switch i := strings.Index(msg, unrecognised); {
	case strings.Contains(msg, "Failed to read any lines from plugin's stdout"), strings.Contains(msg, "plugin exited before we could connect"):
		what = "exited before its handshake"
		if state != nil && state.Exited() {
			what = fmt.Sprintf("exited with status %d before its handshake", state.ExitCode())
		}
	case i >= 0:
		first, _, _ := strings.Cut(msg[i+len(unrecognised):], "\n")
		what = fmt.Sprintf("is not a working rlhost plugin: it printed %q on stdout where a plugin prints its handshake line", clip(first, 120))
	case strings.Contains(msg, "timeout while waiting for plugin to start"):
		what = "did not complete its handshake in time"
	default:
		what = "failed its handshake: " + msg
	}
	name := fmt.Sprintf("%s plugin %q", src.Kind, src.Name)
	if src.Builtin {
		name = "built-in " + name
	}
	runBy := "it ran as " + strings.Join(append([]string{src.Path}, src.Args...), " ")
	if isPythonScript(src.Name) {
		runBy = fmt.Sprintf("interpreter %s (python = \"...\" in the env block names another)", src.Path)
	}
	said := excerpt(stderr)
	if len(said) == 0 {
		return fmt.Errorf("%s %s, and wrote nothing to stderr; %s", name, what, runBy)
	}
	if hint := pythonHint(said); hint != "" {
		said = append(said, hint)
	}
	return fmt.Errorf("%s\n(%s %s; %s)", strings.Join(said, "\n"), name, what, runBy)
}

// excerpt picks what a dying plugin said that matters, from its last
// stderr lines: a Python traceback's exception and where it was raised, a
// Go crash's panic line, or else the last few lines. hclog JSON lines are
// shown as their level and message.
func excerpt(lines []string) []string {
	var clean []string
	for _, l := range lines {
		l = strings.TrimRight(strings.TrimPrefix(l, "[ERROR] "), " \t\r")
		if strings.HasPrefix(l, "{") {
			var e struct {
				Level   string `json:"@level"`
				Message string `json:"@message"`
			}
			if json.Unmarshal([]byte(l), &e) == nil && e.Message != "" {
				l = e.Level + ": " + e.Message
			}
		}
		clean = append(clean, l)
	}
	for len(clean) > 0 && strings.TrimSpace(clean[len(clean)-1]) == "" {
		clean = clean[:len(clean)-1]
	}
	if py := pythonException(clean); len(py) > 0 {
		return py
	}
	for i, l := range clean {
		if strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") {
			out := []string{l}
			for _, next := range clean[i+1:] {
				if strings.HasPrefix(next, "goroutine ") || len(out) == 4 {
					break
				}
				if strings.TrimSpace(next) != "" {
					out = append(out, next)
				}
			}
			return out
		}
	}
	var out []string
	for i := len(clean) - 1; i >= 0 && len(out) < 5; i-- {
		if strings.TrimSpace(clean[i]) != "" {
			out = append([]string{clean[i]}, out...)
		}
	}
	return out
}

// pythonException returns the exception of the last Python traceback in
// lines, with the place it was raised: "ImportError: ..." then
// "  (raised at FILE, line N)". nil when there is no traceback.
func pythonException(lines []string) []string {
	start := -1
	for i, l := range lines {
		if l == "Traceback (most recent call last):" {
			start = i
		}
	}
	if start < 0 {
		return nil
	}
	frame := ""
	var exc []string
	for _, l := range lines[start+1:] {
		switch {
		case strings.HasPrefix(l, `  File "`):
			frame, exc = strings.TrimSpace(l), nil
		case strings.HasPrefix(l, " "), l == "":
			// the frame's source line and its ^^^ markers
		default:
			exc = append(exc, l)
		}
	}
	if len(exc) == 0 {
		return nil
	}
	if len(exc) > 5 {
		exc = exc[:5]
	}
	if frame != "" {
		exc = append(exc, "  (raised at "+strings.TrimPrefix(frame, "File ")+")")
	}
	return exc
}

// pythonHint says how to make the SDK importable when the script could
// not import it.
func pythonHint(said []string) string {
	for _, l := range said {
		if strings.Contains(l, "No module named 'rlhost_env'") {
			return "rlhost_env is not installed for this interpreter: pip install ./core/sdk/envplugin/python from an rlhost checkout, or add its directory to sys.path in the script (docs/python-env.md#install)"
		}
	}
	return ""
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
