package aviato

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/rlhost/rlhost/core/sdk/sandboxplugin"
)

// How exec works. ATCService.Exec takes an argv and answers stdout, stderr
// and the exit code, but has no fields for env, directory or stdin, and
// returns whole outputs. So rlhost runs
//
//	/bin/sh -c <script> rlhost-exec <argv...>
//
// where the script enters the directory, exports the env, feeds stdin
// (inline as base64, or from a file uploaded first when large), and cuts
// each output after cap+1 bytes while draining the rest, so the program
// never sees SIGPIPE and no more than the cap crosses the network. The argv
// itself is passed as positional parameters, so no user byte is parsed by
// the shell. The image needs sh, base64, mkfifo, mktemp, head and cat.

// maxInlineStdin keeps the script below Linux's 128 KiB per-argument limit.
const maxInlineStdin = 48 << 10

func newNonce() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return hex.EncodeToString(b[:])
}

// execScript is what the shell runs.
type execScript struct {
	dir       string
	env       map[string]string
	stdin     []byte // inline; nil when stdinFile is set or there is none
	stdinFile string // path of an uploaded stdin, removed afterwards
	cap       int64
}

func (s execScript) render() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	// Enter the directory first: once the FIFO readers run, every exit
	// path must open the FIFOs, or the readers (holding stdout) hang.
	w("cd %s || exit 125\n", sandboxplugin.ShellQuote(s.dir))
	w("d=$(mktemp -d) || { echo 'rlhost: mktemp failed' >&2; exit 125; }\n")
	if s.stdinFile != "" {
		w("trap 'rm -rf \"$d\" %s' EXIT\n", sandboxplugin.ShellQuote(s.stdinFile))
	} else {
		w("trap 'rm -rf \"$d\"' EXIT\n")
	}
	if s.stdinFile != "" {
		// Opened, then unlinked before the program starts: a request's
		// secrets (the coding env's verdict nonce) must not be readable
		// on disk while the program runs.
		q := sandboxplugin.ShellQuote(s.stdinFile)
		w("exec 3<%s || exit 125\nrm -f %s\n", q, q)
	}
	w("mkfifo \"$d/o\" \"$d/e\" || exit 125\n")
	w("{ head -c %d; cat >/dev/null; } <\"$d/o\" &\n", s.cap+1)
	w("{ head -c %d >&2; cat >/dev/null; } <\"$d/e\" &\n", s.cap+1)
	// The readers hold the real stderr; the shell's own job reports
	// ("Killed") must not join the program's.
	w("exec 2>/dev/null\n")
	if len(s.stdin) > 0 {
		w("printf '%%s' %s | base64 -d | ", sandboxplugin.ShellQuote(base64.StdEncoding.EncodeToString(s.stdin)))
	}
	w("(\n")
	b.WriteString(sandboxplugin.ShellExports(s.env))
	w("exec \"$@\"\n)")
	switch {
	case s.stdinFile != "":
		w(" <&3 3<&-")
	case len(s.stdin) == 0:
		w(" </dev/null")
	}
	w(" >\"$d/o\" 2>\"$d/e\"\n")
	w("rc=$?\nwait\nexit \"$rc\"\n")
	return b.String()
}

// command is the ATCService argv that runs argv under the script.
func (s execScript) command(argv []string) []string {
	return append([]string{"/bin/sh", "-c", s.render(), "rlhost-exec"}, argv...)
}

// capOutput cuts b to n bytes and says whether it did.
func capOutput(b []byte, n int64) (string, bool) {
	if int64(len(b)) > n {
		return string(b[:n]), true
	}
	return string(b), false
}
