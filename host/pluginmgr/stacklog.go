package pluginmgr

import (
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// stackIdle is how long a plugin's raw crash output may pause before the
// lines gathered so far are printed as one block. A dying Go process writes
// its whole trace in one burst, well within this.
const stackIdle = 200 * time.Millisecond

// stackJoiner is the logger go-plugin relays a plugin's stderr through. A
// plugin that dies of a panic writes Go's raw trace, which go-plugin relays
// one Error call per line; stackJoiner gathers those lines, from "panic: "
// or "fatal error: " on, and prints them as one entry whose multi-line
// value hclog renders as a block. Everything else passes straight through
// (after any pending block, to keep the order). The trace goes on until
// its lines pause for stackIdle: go-plugin may report the plugin's exit
// before it has relayed the whole trace, and the lines after that entry
// make a second block, not an error entry each.
type stackJoiner struct {
	hclog.Logger
	*pending // shared with derived loggers, so any of them flushes first
}

type pending struct {
	mu      sync.Mutex
	out     hclog.Logger // the logger the lines came through
	lines   []string
	inTrace bool        // a trace is coming in: until its lines pause
	timer   *time.Timer // ends the trace after the pause
	gen     uint64      // counts gathered lines, so a stale timer does nothing
}

func joinStacks(l hclog.Logger) *stackJoiner { return &stackJoiner{Logger: l, pending: &pending{}} }

func (s *stackJoiner) Error(msg string, args ...any) {
	if len(args) == 0 && s.gather(msg) {
		return
	}
	s.Flush()
	s.Logger.Error(msg, args...)
}

// gather keeps msg when it starts or continues a raw crash trace.
func (s *stackJoiner) gather(msg string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.inTrace && !strings.HasPrefix(msg, "panic: ") && !strings.HasPrefix(msg, "fatal error: ") {
		return false
	}
	s.inTrace = true
	s.out = s.Logger
	s.lines = append(s.lines, msg)
	s.gen++
	gen := s.gen
	if s.timer != nil {
		s.timer.Stop()
	}
	s.timer = time.AfterFunc(stackIdle, func() { s.pending.end(gen) })
	return true
}

// Flush prints the gathered trace, if any, as one entry; lines that follow
// before the pause still belong to it.
func (s *stackJoiner) Flush() { s.pending.flush() }

// end closes the trace whose last line was number gen, once its lines
// have paused, and prints what is left of it.
func (s *pending) end(gen uint64) {
	s.mu.Lock()
	if s.gen != gen { // a later line came: its own timer ends the trace
		s.mu.Unlock()
		return
	}
	s.inTrace, s.timer = false, nil
	s.mu.Unlock()
	s.flush()
}

func (s *pending) flush() {
	s.mu.Lock()
	lines, out := s.lines, s.out
	s.lines = nil
	s.mu.Unlock()
	if len(lines) > 0 {
		// hclog would print Go's tab indents as \t.
		out.Error("plugin crashed", "output", strings.ReplaceAll(strings.Join(lines, "\n"), "\t", "    "))
	}
}

func (s *stackJoiner) Log(level hclog.Level, msg string, args ...any) {
	s.Flush()
	s.Logger.Log(level, msg, args...)
}

func (s *stackJoiner) Trace(msg string, args ...any) { s.Flush(); s.Logger.Trace(msg, args...) }
func (s *stackJoiner) Debug(msg string, args ...any) { s.Flush(); s.Logger.Debug(msg, args...) }
func (s *stackJoiner) Info(msg string, args ...any)  { s.Flush(); s.Logger.Info(msg, args...) }
func (s *stackJoiner) Warn(msg string, args ...any)  { s.Flush(); s.Logger.Warn(msg, args...) }

// Named, ResetNamed and With keep the joining in the derived logger that
// go-plugin actually writes the plugin's stderr through.
func (s *stackJoiner) Named(name string) hclog.Logger {
	return &stackJoiner{Logger: s.Logger.Named(name), pending: s.pending}
}

func (s *stackJoiner) ResetNamed(name string) hclog.Logger {
	return &stackJoiner{Logger: s.Logger.ResetNamed(name), pending: s.pending}
}

func (s *stackJoiner) With(args ...any) hclog.Logger {
	return &stackJoiner{Logger: s.Logger.With(args...), pending: s.pending}
}
