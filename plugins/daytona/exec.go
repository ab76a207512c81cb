package daytona

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/rlhost/rlhost/core/sdk/sandboxplugin"
)

// How exec works. Daytona's /process/execute takes one command string and
// answers {exitCode, result} with stdout and stderr merged, re-encoded as a
// JSON string (invalid UTF-8 is lost). Daemons have either split that string
// on spaces and quotes themselves or fed it to a shell, so rlhost sends a
// command that means the same to both and carries no user bytes in clear:
//
//	sh -c 'eval "$(printf %s <base64 script> | base64 -d)"'
//
// The script (plain POSIX sh) runs argv with the request's env and stdin,
// captures stdout and stderr through FIFOs, each cut after cap+1 bytes while
// the rest is drained (so the program never sees SIGPIPE), and prints one
// frame:
//
//	<nonce>|<exit status>|<base64 stdout>|<base64 stderr>|<nonce>
//
// which the backend decodes exactly, bytes and all. The nonce is fresh per
// exec so program output cannot be mistaken for the frame. Scripts too big
// for one argv string are uploaded to a file first and run with `sh file`.
// The image needs sh, base64, mkfifo, mktemp, head and cat: coreutils or
// busybox.

// execScript is what runs in the sandbox.
type execScript struct {
	argv   []string
	env    map[string]string
	stdin  []byte
	cap    int64 // bytes kept per stream
	nonce  string
	inFile bool // run as `sh file`: delete the file first
}

func newNonce() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return "rlhost" + hex.EncodeToString(b[:])
}

func (s execScript) validate() error { return sandboxplugin.CheckArgv(s.argv, s.env) }

func (s execScript) render() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	if s.inFile {
		w("rm -f -- \"$0\"\n")
	}
	w("N=%s\n", s.nonce)
	w("d=$(mktemp -d) || { echo 'rlhost: mktemp failed' >&2; exit 125; }\n")
	w("trap 'rm -rf \"$d\"' EXIT\n")
	w("mkfifo \"$d/o\" \"$d/e\" || exit 125\n")
	keep := s.cap + 1 // one byte more than kept tells truncation apart
	w("{ head -c %d >\"$d/oc\"; cat >/dev/null; } <\"$d/o\" &\n", keep)
	w("{ head -c %d >\"$d/ec\"; cat >/dev/null; } <\"$d/e\" &\n", keep)
	if len(s.stdin) > 0 {
		w("printf '%%s' %s | base64 -d | ", sandboxplugin.ShellQuote(base64.StdEncoding.EncodeToString(s.stdin)))
	}
	w("(\n")
	b.WriteString(sandboxplugin.ShellExports(s.env))
	w("exec")
	for _, a := range s.argv {
		w(" %s", sandboxplugin.ShellQuote(a))
	}
	w("\n)")
	if len(s.stdin) == 0 {
		w(" </dev/null")
	}
	w(" >\"$d/o\" 2>\"$d/e\"\n")
	w("rc=$?\n")
	w("wait\n")
	w("printf '%%s|%%s|' \"$N\" \"$rc\"\n")
	// base64 wraps its output; the decoder skips the newlines.
	w("base64 <\"$d/oc\"\n")
	w("printf '|'\n")
	w("base64 <\"$d/ec\"\n")
	w("printf '|%%s\\n' \"$N\"\n")
	w("exit \"$rc\"\n")
	return b.String()
}

// inlineCommand is the execute-API command that runs script without files.
func inlineCommand(script string) string {
	return `sh -c 'eval "$(printf %s ` + base64.StdEncoding.EncodeToString([]byte(script)) + ` | base64 -d)"'`
}

// execFrame is a decoded frame.
type execFrame struct {
	exitCode       int
	stdout, stderr []byte
}

// parseFrame finds the frame of nonce in the merged output of the script.
// Anything around it (a shell's own complaint, say) is ignored.
func parseFrame(out, nonce string) (execFrame, error) {
	start := strings.LastIndex(out, nonce+"|")
	if start < 0 {
		return execFrame{}, errors.New("no exec frame in output")
	}
	rest := out[start+len(nonce)+1:]
	end := strings.Index(rest, "|"+nonce)
	if end < 0 {
		return execFrame{}, errors.New("exec frame not terminated")
	}
	parts := strings.Split(rest[:end], "|")
	if len(parts) != 3 {
		return execFrame{}, fmt.Errorf("exec frame has %d fields, want 3", len(parts))
	}
	rc, err := strconv.Atoi(parts[0])
	if err != nil || rc < 0 || rc > 255 {
		return execFrame{}, fmt.Errorf("exec frame: bad exit status %q", parts[0])
	}
	so, err := base64.StdEncoding.DecodeString(parts[1])
	if err != nil {
		return execFrame{}, fmt.Errorf("exec frame: stdout: %w", err)
	}
	se, err := base64.StdEncoding.DecodeString(parts[2])
	if err != nil {
		return execFrame{}, fmt.Errorf("exec frame: stderr: %w", err)
	}
	return execFrame{exitCode: rc, stdout: so, stderr: se}, nil
}

// excerpt shortens wrapper output for an error message.
func excerpt(s string) string {
	const n = 300
	if len(s) > n {
		return strconv.Quote(s[:n]) + "…"
	}
	return strconv.Quote(s)
}
