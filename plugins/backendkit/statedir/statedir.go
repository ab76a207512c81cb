// Package statedir picks the default directory where a sandbox backend
// keeps its cross-process records (sandbox entries, crash records), so that
// every backend puts them under the same roots and a user finds them in
// one place.
//
// It only names the directory; it creates nothing, and the backend's
// state_dir setting overrides it.
package statedir

import (
	"fmt"
	"os"
	"path/filepath"
)

// PerUser is the state directory of the backend called name for the
// current user: $XDG_STATE_HOME/rlhost/NAME, else
// ~/.local/state/rlhost/NAME, else (no home directory) a per-user
// directory under the system's temporary directory. Cloud backends use it:
// their records are one user's runs.
func PerUser(name string) string {
	return perUser(name, os.Geteuid(), os.Getenv("XDG_STATE_HOME"), os.UserHomeDir, os.TempDir())
}

// Machine is PerUser, except as root: /var/lib/rlhost/NAME. Backends whose
// sandboxes are this machine's own processes use it, so that every root
// process (a run, `rlhost sandbox rm`) finds the same records.
func Machine(name string) string {
	return machine(name, os.Geteuid(), os.Getenv("XDG_STATE_HOME"), os.UserHomeDir, os.TempDir())
}

func machine(name string, euid int, xdg string, home func() (string, error), tmp string) string {
	if euid == 0 {
		return filepath.Join("/var/lib/rlhost", name)
	}
	return perUser(name, euid, xdg, home, tmp)
}

func perUser(name string, euid int, xdg string, home func() (string, error), tmp string) string {
	if xdg != "" {
		return filepath.Join(xdg, "rlhost", name)
	}
	if h, err := home(); err == nil && h != "" {
		return filepath.Join(h, ".local", "state", "rlhost", name)
	}
	return filepath.Join(tmp, fmt.Sprintf("rlhost-%d", euid), name)
}
