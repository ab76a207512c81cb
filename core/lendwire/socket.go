package lendwire

import (
	"io/fs"
	"os"
	"path/filepath"
)

// RemoveSocket removes the socket at path that a plugin served and is gone,
// which a plugin that was killed could not do itself: only a socket, and
// then its directory if that is left empty, so a wrong path costs nothing
// else.
func RemoveSocket(path string) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&fs.ModeSocket != 0 {
		_ = os.Remove(path)
		_ = os.Remove(filepath.Dir(path))
	}
}
