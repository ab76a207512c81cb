package sandboxplugin

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Helpers for backends whose service runs a command as one shell string:
// they rebuild argv, env and stdin inside a POSIX sh script, so what the
// script quotes must come out byte for byte, and what sh cannot carry
// (NUL bytes, names that are not identifiers) is refused up front.

// ShellQuote quotes s for a POSIX shell: inside single quotes nothing is
// special, and a single quote is written as '"'"'.
func ShellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'"
}

// ShellExports is one `export NAME='value'` line per variable, sorted by
// name so the same request always renders the same script. Check the names
// with CheckArgv first.
func ShellExports(env map[string]string) string {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString("export " + k + "=" + ShellQuote(env[k]) + "\n")
	}
	return b.String()
}

// CheckArgv refuses an exec request a shell cannot carry exactly: an empty
// command, a NUL byte in an argument or a value, or a variable name that is
// not a shell identifier (EnvNamePattern).
func CheckArgv(argv []string, env map[string]string) error {
	if len(argv) == 0 || argv[0] == "" {
		return errors.New("empty command")
	}
	for i, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("argument %d contains a NUL byte", i)
		}
	}
	for k, v := range env {
		if !envName.MatchString(k) {
			return fmt.Errorf("invalid environment variable name %q", k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("environment variable %s contains a NUL byte", k)
		}
	}
	return nil
}
