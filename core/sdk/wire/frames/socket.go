package frames

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// SocketKind is one kind of socket the wires are served on: each lives in
// a directory of its own in the temp directory, named Prefix and random
// characters, which only its user can enter.
type SocketKind struct {
	Prefix string // of the directory
	Name   string // of the socket in it
}

// The kinds of socket rlhost serves.
var (
	// EpisodeSocket is an env plugin's, for the host's episode calls.
	EpisodeSocket = SocketKind{Prefix: "rlhost-env-", Name: "episode.sock"}
	// HostLentSocket is the host's, lending sandboxes to one env plugin.
	HostLentSocket = SocketKind{Prefix: "rlhost-lend-", Name: "sandbox.sock"}
	// BackendLentSocket is a backend plugin's, lending its own sandboxes.
	BackendLentSocket = SocketKind{Prefix: "rlhost-backend-", Name: "sandbox.sock"}
)

func socketKinds() []SocketKind {
	return []SocketKind{EpisodeSocket, HostLentSocket, BackendLentSocket}
}

// ListenPrivate opens a socket of kind k in a new directory that only this
// user can enter, and returns it and its path. The server removes the
// directory when it is done with it (os.RemoveAll).
func ListenPrivate(k SocketKind) (net.Listener, string, error) {
	dir, err := os.MkdirTemp("", k.Prefix) // mode 0700
	if err != nil {
		return nil, "", err
	}
	path := filepath.Join(dir, k.Name)
	ln, err := net.Listen("unix", path)
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", err
	}
	return ln, path, nil
}

// RemoveSocket removes the socket at path, and then its directory if that
// is left empty: only a socket of a known kind where ListenPrivate puts
// them, so a wrong path, or one a plugin made up, costs nothing else. A
// plugin that was killed cannot do it itself; the host does, for it.
// It reports whether the socket went.
func RemoveSocket(path string) bool {
	if !privatePath(path) {
		return false
	}
	// The directory itself, not a link to one elsewhere.
	if di, err := os.Lstat(filepath.Dir(path)); err != nil || !di.IsDir() {
		return false
	}
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode()&fs.ModeSocket == 0 || os.Remove(path) != nil {
		return false
	}
	_ = os.Remove(filepath.Dir(path))
	return true
}

// privatePath reports whether path is where ListenPrivate puts a socket
// of some kind.
func privatePath(path string) bool {
	dir := filepath.Dir(path)
	if filepath.Dir(dir) != filepath.Clean(os.TempDir()) {
		return false
	}
	for _, k := range socketKinds() {
		if strings.HasPrefix(filepath.Base(dir), k.Prefix) && filepath.Base(path) == k.Name {
			return true
		}
	}
	return false
}

// sweepMinAge spares a socket this young: one between bind and listen
// refuses connections too.
const sweepMinAge = 10 * time.Second

// SweepDeadSockets removes, from the temp directory, the sockets of every
// kind that no process serves any more (a connect is refused) and their
// directories: what processes killed with SIGKILL, host and plugins
// together, leave behind. Only this user's private directories holding
// nothing but the socket are touched. It returns the paths it removed.
func SweepDeadSockets() []string {
	entries, err := os.ReadDir(os.TempDir())
	if err != nil {
		return nil
	}
	var removed []string
	for _, e := range entries {
		for _, k := range socketKinds() {
			if !e.IsDir() || !strings.HasPrefix(e.Name(), k.Prefix) {
				continue
			}
			path := filepath.Join(os.TempDir(), e.Name(), k.Name)
			if deadSocket(path) && RemoveSocket(path) {
				removed = append(removed, path)
			}
		}
	}
	return removed
}

// deadSocket reports whether path is an old socket alone in a private
// directory of this user that refuses connections.
func deadSocket(path string) bool {
	dir := filepath.Dir(path)
	di, err := os.Lstat(dir)
	if err != nil || !di.IsDir() || di.Mode().Perm() != 0o700 || !ownedByMe(di) {
		return false
	}
	names, err := os.ReadDir(dir)
	if err != nil || len(names) != 1 || names[0].Name() != filepath.Base(path) {
		return false
	}
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode()&fs.ModeSocket == 0 || !ownedByMe(fi) || time.Since(fi.ModTime()) < sweepMinAge {
		return false
	}
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		conn.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

func ownedByMe(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Getuid()
}
