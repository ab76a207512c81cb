package statedir

import (
	"errors"
	"testing"
)

func TestDirs(t *testing.T) {
	withHome := func() (string, error) { return "/home/u", nil }
	noHome := func() (string, error) { return "", errors.New("no home") }
	tests := []struct {
		name             string
		euid             int
		xdg              string
		home             func() (string, error)
		perUser, machine string
	}{
		{"root", 0, "/x", withHome, "/x/rlhost/b", "/var/lib/rlhost/b"},
		{"root without xdg", 0, "", withHome, "/home/u/.local/state/rlhost/b", "/var/lib/rlhost/b"},
		{"xdg", 1000, "/x", withHome, "/x/rlhost/b", "/x/rlhost/b"},
		{"home", 1000, "", withHome, "/home/u/.local/state/rlhost/b", "/home/u/.local/state/rlhost/b"},
		{"no home", 1000, "", noHome, "/tmp/rlhost-1000/b", "/tmp/rlhost-1000/b"},
	}
	for _, tt := range tests {
		if got := perUser("b", tt.euid, tt.xdg, tt.home, "/tmp"); got != tt.perUser {
			t.Errorf("%s: perUser %q, want %q", tt.name, got, tt.perUser)
		}
		if got := machine("b", tt.euid, tt.xdg, tt.home, "/tmp"); got != tt.machine {
			t.Errorf("%s: machine %q, want %q", tt.name, got, tt.machine)
		}
	}
	if PerUser("daytona") == "" || Machine("local") == "" {
		t.Error("an empty default")
	}
}
