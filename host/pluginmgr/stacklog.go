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
// (after any pending block, to keep the order).
type stackJoiner struct {
	hclog.Logger
	*pending // shared with derived loggers, so any of them flushes first
}

type pending struct {
	mu    sync.Mutex
	out   hclog.Logger // the logger the lines came through
	lines []string
	timer *time.Timer
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
	if len(s.lines) == 0 && !strings.HasPrefix(msg, "panic: ") && !strings.HasPrefix(msg, "fatal error: ") {
		return false
	}
	s.out = s.Logger
	s.lines = append(s.lines, msg)
	if s.timer == nil {
		s.timer = time.AfterFunc(stackIdle, s.pending.flush)
	} else {
		s.timer.Reset(stackIdle)
	}
	return true
}

// Flush prints the gathered trace, if any, as one entry.
func (s *stackJoiner) Flush() { s.pending.flush() }

func (s *pending) flush() {
	s.mu.Lock()
	lines, out := s.lines, s.out
	s.lines = nil
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
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
