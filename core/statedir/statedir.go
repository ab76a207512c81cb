// Package statedir picks the default directory where a sandbox backend
// keeps its cross-process records (sandbox entries, crash records), so that
// every backend puts them under the same root and a user finds them in one
// place.
//
// It only names the directory; it creates nothing, and the backend's
// state_dir setting overrides it.
package statedir

import (
	"fmt"
	"os"
	"path/filepath"
)

// Default is the state directory of the backend called name:
// /var/lib/rlhost/NAME as root, else $XDG_STATE_HOME/rlhost/NAME, else
// ~/.local/state/rlhost/NAME, else (no home directory) a per-user
// directory under the system's temporary directory.
func Default(name string) string {
	return forUser(name, os.Geteuid(), os.Getenv("XDG_STATE_HOME"), home, os.TempDir())
}

func home() (string, error) { return os.UserHomeDir() }

func forUser(name string, euid int, xdg string, home func() (string, error), tmp string) string {
	switch {
	case euid == 0:
		return filepath.Join("/var/lib/rlhost", name)
	case xdg != "":
		return filepath.Join(xdg, "rlhost", name)
	}
	if h, err := home(); err == nil && h != "" {
		return filepath.Join(h, ".local", "state", "rlhost", name)
	}
	return filepath.Join(tmp, fmt.Sprintf("rlhost-%d", euid), name)
}
