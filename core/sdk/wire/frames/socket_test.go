package frames

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// deadSocketAt leaves a socket at path that nothing serves any more, as a
// process killed with SIGKILL leaves it.
func deadSocketAt(t *testing.T, path string) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
}

// deadIn leaves an old dead socket named name in a new directory dir
// (with mode) under tmp, and returns its path.
func deadIn(t *testing.T, tmp, dir, name string, mode os.FileMode) string {
	t.Helper()
	p := mkdir(t, tmp, dir, name, mode)
	deadSocketAt(t, p)
	age(t, p)
	return p
}

func age(t *testing.T, path string) {
	t.Helper()
	old := time.Now().Add(-time.Minute)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
}

// The sweep removes only what a killed process left: this user's private
// directory of a known kind, holding its socket alone, old enough, and
// refusing connections.
func TestSweepDeadSockets(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	cases := []struct {
		name   string
		make   func(t *testing.T) string // returns the socket path
		remove bool
	}{
		{"a dead episode socket", func(t *testing.T) string { return deadIn(t, tmp, "rlhost-env-1", EpisodeSocket.Name, 0o700) }, true},
		{"a dead backend socket", func(t *testing.T) string { return deadIn(t, tmp, "rlhost-backend-1", BackendLentSocket.Name, 0o700) }, true},
		{"a dead host lent socket", func(t *testing.T) string { return deadIn(t, tmp, "rlhost-lend-1", HostLentSocket.Name, 0o700) }, true},
		{"a live socket", func(t *testing.T) string {
			ln, p, err := ListenPrivate(BackendLentSocket)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					c.Close()
				}
			}()
			age(t, p)
			return p
		}, false},
		{"a young dead socket", func(t *testing.T) string {
			p := mkdir(t, tmp, "rlhost-env-2", EpisodeSocket.Name, 0o700)
			deadSocketAt(t, p)
			return p
		}, false},
		{"a directory holding more", func(t *testing.T) string {
			p := mkdir(t, tmp, "rlhost-env-3", EpisodeSocket.Name, 0o700)
			deadSocketAt(t, p)
			age(t, p)
			os.WriteFile(filepath.Join(filepath.Dir(p), "keep"), nil, 0o600)
			return p
		}, false},
		{"a directory others may enter", func(t *testing.T) string { return deadIn(t, tmp, "rlhost-env-4", EpisodeSocket.Name, 0o755) }, false},
		{"another prefix", func(t *testing.T) string { return deadIn(t, tmp, "rlhost-other-1", EpisodeSocket.Name, 0o700) }, false},
		{"another socket name", func(t *testing.T) string { return deadIn(t, tmp, "rlhost-env-5", "grpc.sock", 0o700) }, false},
		{"a file, not a socket", func(t *testing.T) string {
			p := mkdir(t, tmp, "rlhost-backend-2", BackendLentSocket.Name, 0o700)
			os.WriteFile(p, nil, 0o600)
			age(t, p)
			return p
		}, false},
		{"a link to a dead socket's directory", func(t *testing.T) string {
			real := t.TempDir()
			p := filepath.Join(real, EpisodeSocket.Name)
			deadSocketAt(t, p)
			age(t, p)
			os.Chmod(real, 0o700)
			link := filepath.Join(tmp, "rlhost-env-6")
			if err := os.Symlink(real, link); err != nil {
				t.Fatal(err)
			}
			return p // the link's target must stay
		}, false},
	}
	paths := make([]string, len(cases))
	for i, tc := range cases {
		paths[i] = tc.make(t)
	}
	removed := SweepDeadSockets()
	for i, tc := range cases {
		_, err := os.Lstat(paths[i])
		gone := os.IsNotExist(err)
		_, derr := os.Lstat(filepath.Dir(paths[i]))
		if gone != tc.remove || os.IsNotExist(derr) != tc.remove {
			t.Errorf("%s: socket gone %v, directory gone %v; want %v", tc.name, gone, os.IsNotExist(derr), tc.remove)
		}
		if slices.Contains(removed, paths[i]) != tc.remove {
			t.Errorf("%s: reported removed %v, want %v", tc.name, slices.Contains(removed, paths[i]), tc.remove)
		}
	}
}

// mkdir makes dir under tmp with mode and returns the path of name in it.
func mkdir(t *testing.T, tmp, dir, name string, mode os.FileMode) string {
	t.Helper()
	d := filepath.Join(tmp, dir)
	if err := os.Mkdir(d, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, mode); err != nil { // past the umask
		t.Fatal(err)
	}
	return filepath.Join(d, name)
}
