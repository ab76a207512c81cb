package pluginmgr

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/rlhost/rlhost/core/logtest"
)

// A raw Go crash trace, relayed by go-plugin one Error call per line, is
// printed as one entry with the trace as a block.
func TestStackJoinerPrintsOneBlock(t *testing.T) {
	out := &logtest.Buffer{}
	base := hclog.New(&hclog.LoggerOptions{Name: "rlhost", Output: out, Level: hclog.Debug, DisableTime: true})
	// go-plugin derives its stderr logger with Named.
	parent := joinStacks(base.Named("env.probe"))
	l := parent.Named("probeenv")
	trace := []string{"panic: assignment to entry in nil map", "", "goroutine 7 [running]:", "main.(*session).Step(...)", "\t/src/main.go:42 +0x1d", "exit status 2"}
	l.Warn("before", "k", "v")
	for _, line := range trace {
		l.Error(line)
	}
	// The block is printed once the output pauses, or before the next entry.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "exit status 2") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	parent.Info("after") // go-plugin logs the exit on the parent logger
	got := out.String()
	if n := strings.Count(got, "[ERROR]"); n != 1 {
		t.Fatalf("%d error entries, want 1:\n%s", n, got)
	}
	for _, line := range trace {
		if line != "" && !strings.Contains(got, "| "+strings.ReplaceAll(line, "\t", "    ")+"\n") {
			t.Errorf("trace line %q is not in the block:\n%s", line, got)
		}
	}
	if !(strings.Index(got, "before") < strings.Index(got, "panic:") && strings.Index(got, "panic:") < strings.Index(got, "after")) {
		t.Errorf("entries out of order:\n%s", got)
	}
	if !strings.Contains(got, "rlhost.env.probe.probeenv: plugin crashed") {
		t.Errorf("the block is not under the plugin's name:\n%s", got)
	}
}

// Errors that are not a crash trace pass straight through.
func TestStackJoinerPassesOtherErrors(t *testing.T) {
	out := &logtest.Buffer{}
	l := joinStacks(hclog.New(&hclog.LoggerOptions{Output: out, DisableTime: true}))
	l.Error("[ERROR] something failed")
	l.Error("oops", "err", "x")
	if got := out.String(); strings.Count(got, "\n") != 2 || !strings.Contains(got, "something failed\n") {
		t.Errorf("got:\n%s", got)
	}
}

// The next entry on any logger of the plugin (go-plugin reports the exit on
// the parent) prints the pending trace first, without waiting for the pause.
func TestStackJoinerFlushesBeforeNextEntry(t *testing.T) {
	out := &logtest.Buffer{}
	parent := joinStacks(hclog.New(&hclog.LoggerOptions{Output: out, DisableTime: true}))
	l := parent.Named("probeenv")
	l.Error("panic: boom")
	l.Error("goroutine 1 [running]:")
	parent.Error("plugin process exited", "error", "exit status 2")
	got := out.String()
	if i, j := strings.Index(got, "| panic: boom"), strings.Index(got, "plugin process exited"); i < 0 || j < i {
		t.Errorf("the trace does not come before the exit:\n%s", got)
	}
}

// go-plugin may report the exit before it has relayed the whole trace: the
// lines after the exit entry are the trace's still, a second block, not an
// error entry each. Once the lines pause, plain errors pass through again.
func TestStackJoinerTraceGoesOnAfterTheExit(t *testing.T) {
	out := &logtest.Buffer{}
	parent := joinStacks(hclog.New(&hclog.LoggerOptions{Output: out, DisableTime: true}))
	l := parent.Named("probeenv")
	l.Error("panic: boom")
	l.Error("goroutine 1 [running]:")
	parent.Error("plugin process exited", "error", "exit status 2")
	l.Error("created by main.(*session).Step in goroutine 37")
	l.Error("\t/src/main.go:42 +0x1d")
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "main.go:42") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	l.Error("after the pause")
	got := out.String()
	for _, line := range strings.Split(got, "\n") {
		if strings.Contains(line, "[ERROR]") && strings.Contains(line, "goroutine ") {
			t.Errorf("a trace line was logged as its own entry: %q", line)
		}
	}
	if !strings.Contains(got, "| created by main.(*session).Step in goroutine 37\n") {
		t.Errorf("the trace's rest is not in a block:\n%s", got)
	}
	if i, j := strings.Index(got, "plugin process exited"), strings.Index(got, "created by"); i < 0 || j < i {
		t.Errorf("the rest of the trace does not follow the exit:\n%s", got)
	}
	if !strings.Contains(got, "[ERROR] probeenv: after the pause\n") {
		t.Errorf("a plain error after the pause was not passed through:\n%s", got)
	}
}
