// Package cliflag gives every rlhost command the same flag behaviour: help
// that was asked for goes to stdout and exits 0; a bad flag prints the
// error, a "did you mean" when a known flag is close, and a pointer to
// --help on stderr, and exits 2. It does not define any flags itself.
package cliflag

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"

	"github.com/rlhost/rlhost/core/suggest"
)

// New returns a flag set for command (e.g. "rlhost run") whose --help
// prints usage followed by the flags to stdout, and whose errors Parse
// prints to stderr.
func New(command, usage string, stdout, stderr io.Writer) *pflag.FlagSet {
	fs := pflag.NewFlagSet(command, pflag.ContinueOnError)
	// With ContinueOnError pflag itself prints nothing but Usage; Parse
	// prints errors to the set's output.
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stdout, usage)
		if !strings.HasSuffix(usage, "\n") {
			fmt.Fprintln(stdout)
		}
		fmt.Fprintf(stdout, "\nFlags:\n%s", fs.FlagUsages())
	}
	return fs
}

// Parse parses args into fs. done is true when the caller should return
// code at once: 0 after --help, 2 after a flag error (already printed to
// the set's output as "COMMAND: ERROR" plus hints).
func Parse(fs *pflag.FlagSet, args []string) (done bool, code int) {
	err := fs.Parse(args)
	if err == nil {
		return false, 0
	}
	if errors.Is(err, pflag.ErrHelp) {
		return true, 0
	}
	fmt.Fprintln(fs.Output(), Message(fs, err))
	return true, 2
}

// Message renders a flag error of fs for the user: the error, the close
// flag if any, and where to look.
func Message(fs *pflag.FlagSet, err error) string {
	msg := fmt.Sprintf("%s: %v", fs.Name(), err)
	var ne *pflag.NotExistError
	if errors.As(err, &ne) {
		if name := strings.TrimLeft(ne.GetSpecifiedName(), "-"); len(name) > 1 {
			var known []string
			fs.VisitAll(func(f *pflag.Flag) { known = append(known, f.Name) })
			known = append(known, "help")
			if s := suggest.Closest(name, known); s != "" {
				msg += fmt.Sprintf("; did you mean --%s?", s)
			}
		}
	}
	return msg + fmt.Sprintf("\nRun '%s --help' for usage.", fs.Name())
}
