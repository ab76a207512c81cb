package statedir

import (
	"errors"
	"testing"
)

func TestForUser(t *testing.T) {
	withHome := func() (string, error) { return "/home/u", nil }
	noHome := func() (string, error) { return "", errors.New("no home") }
	tests := []struct {
		name string
		euid int
		xdg  string
		home func() (string, error)
		want string
	}{
		{"root", 0, "/x", withHome, "/var/lib/rlhost/local"},
		{"xdg", 1000, "/x", withHome, "/x/rlhost/local"},
		{"home", 1000, "", withHome, "/home/u/.local/state/rlhost/local"},
		{"no home", 1000, "", noHome, "/tmp/rlhost-1000/local"},
	}
	for _, tt := range tests {
		if got := forUser("local", tt.euid, tt.xdg, tt.home, "/tmp"); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
	if Default("daytona") == "" {
		t.Error("Default is empty")
	}
}
