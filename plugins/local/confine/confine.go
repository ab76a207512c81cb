// Package confine does file operations on paths that must stay inside one
// directory tree (a sandbox workspace), whatever symlinks, "..", absolute
// paths or special files the tree contains.
//
// Every path is resolved by the kernel with openat2(RESOLVE_BENEATH |
// RESOLVE_NO_MAGICLINKS) relative to a directory fd, so a symlink swapped in
// between a check and a use cannot redirect it. It deliberately knows nothing
// about sandboxes: callers decide where the root is and which size caps apply.
package confine

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rlhost/rlhost/core"
)

// Root is an open directory that paths are confined to.
type Root struct {
	dir   *os.File
	alias string // the absolute name of the root as seen by users, e.g. /workspace
}

// Open opens dir as a confinement root. alias is the absolute path users see
// for it; absolute request paths must lie under alias.
func Open(dir, alias string) (*Root, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("confine: open root %s: %w", dir, err)
	}
	return &Root{dir: os.NewFile(uintptr(fd), dir), alias: path.Clean(alias)}, nil
}

// Close releases the root's directory fd.
func (r *Root) Close() error { return r.dir.Close() }

// Rel maps a request path to a path relative to the root, or fails with
// core.ErrInvalidPath. Relative paths are relative to the root; absolute
// ones must lie under the alias. ".." may not climb above the root.
func Rel(alias, p string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("path %q contains NUL: %w", p, core.ErrInvalidPath)
	}
	if p == "" {
		return ".", nil
	}
	alias = path.Clean(alias)
	if path.IsAbs(p) {
		c := path.Clean(p)
		if c == alias {
			return ".", nil
		}
		if !strings.HasPrefix(c, alias+"/") {
			return "", fmt.Errorf("path %q is outside %s: %w", p, alias, core.ErrInvalidPath)
		}
		return c[len(alias)+1:], nil
	}
	c := path.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("path %q climbs out of %s: %w", p, alias, core.ErrInvalidPath)
	}
	return c, nil
}

const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS

// openat resolves rel beneath the root. Escapes surface as ErrInvalidPath.
func (r *Root) openat(rel string, flags uint64, mode uint32) (*os.File, error) {
	how := unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Mode: uint64(mode), Resolve: resolveFlags}
	for {
		fd, err := unix.Openat2(int(r.dir.Fd()), rel, &how)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if err != nil {
			return nil, mapErr(rel, err)
		}
		return os.NewFile(uintptr(fd), rel), nil
	}
}

func mapErr(rel string, err error) error {
	switch {
	case errors.Is(err, unix.EXDEV), errors.Is(err, unix.ELOOP):
		return fmt.Errorf("%s: %v: %w", rel, err, core.ErrInvalidPath)
	case errors.Is(err, unix.ENOENT):
		return fmt.Errorf("%s: %v: %w", rel, err, core.ErrNotFound)
	case errors.Is(err, unix.EFBIG), errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		return fmt.Errorf("%s: %v: %w", rel, err, core.ErrTooLarge)
	}
	return fmt.Errorf("%s: %w", rel, err)
}

// ReadFile reads a regular file of at most maxBytes bytes.
func (r *Root) ReadFile(p string, maxBytes int64) ([]byte, error) {
	rel, err := Rel(r.alias, p)
	if err != nil {
		return nil, err
	}
	// O_NONBLOCK so that a FIFO planted in the tree cannot hang the reader.
	f, err := r.openat(rel, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("read %s: not a regular file (%s): %w", p, st.Mode().Type(), core.ErrInvalidPath)
	}
	if st.Size() > maxBytes {
		return nil, fmt.Errorf("read %s: %d bytes > cap %d: %w", p, st.Size(), maxBytes, core.ErrTooLarge)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	if int64(len(data)) > maxBytes {
		return nil, fmt.Errorf("read %s: grew past cap %d: %w", p, maxBytes, core.ErrTooLarge)
	}
	return data, nil
}

// WriteFile creates or truncates a regular file, creating parent
// directories, and writes data. It refuses to write through special files.
func (r *Root) WriteFile(p string, data []byte, mode uint32, maxBytes int64) error {
	if int64(len(data)) > maxBytes {
		return fmt.Errorf("write %s: %d bytes > cap %d: %w", p, len(data), maxBytes, core.ErrTooLarge)
	}
	rel, err := Rel(r.alias, p)
	if err != nil {
		return err
	}
	if rel == "." {
		return fmt.Errorf("write %s: is the workspace root: %w", p, core.ErrInvalidPath)
	}
	if mode == 0 {
		mode = 0o644
	}
	mode &= 0o777 // never setuid/setgid/sticky
	if dir := path.Dir(rel); dir != "." {
		if err := r.mkdirAll(dir); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
	}
	f, err := r.openat(rel, unix.O_WRONLY|unix.O_CREAT|unix.O_NONBLOCK|unix.O_NOCTTY, mode)
	if err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("write %s: not a regular file (%s): %w", p, st.Mode().Type(), core.ErrInvalidPath)
	}
	if err := f.Truncate(0); err != nil {
		return fmt.Errorf("write %s: truncate: %w", p, mapErr(rel, err))
	}
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", p, mapErr(rel, err))
	}
	if err := f.Chmod(os.FileMode(mode)); err != nil {
		return fmt.Errorf("write %s: chmod: %w", p, err)
	}
	return nil
}

// mkdirAll creates rel and its parents, each step resolved beneath the root.
func (r *Root) mkdirAll(rel string) error {
	parts := strings.Split(rel, "/")
	cur := ""
	for _, part := range parts {
		if cur == "" {
			cur = part
		} else {
			cur += "/" + part
		}
		d, err := r.openat(cur, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err == nil {
			d.Close()
			continue
		}
		if !errors.Is(err, core.ErrNotFound) {
			return err
		}
		parent := "."
		if i := strings.LastIndexByte(cur, '/'); i >= 0 {
			parent = cur[:i]
		}
		pd, err := r.openat(parent, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		err = unix.Mkdirat(int(pd.Fd()), part, 0o755)
		pd.Close()
		if err != nil && err != unix.EEXIST {
			return mapErr(cur, err)
		}
	}
	return nil
}

// List lists a directory (not recursively). Paths in the result are as the
// caller would name them: under the alias.
func (r *Root) List(p string, maxEntries int) ([]core.FileInfo, error) {
	rel, err := Rel(r.alias, p)
	if err != nil {
		return nil, err
	}
	d, err := r.openat(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", p, err)
	}
	defer d.Close()
	names, err := d.Readdirnames(maxEntries + 1)
	if err != nil && err != io.EOF {
		return nil, fmt.Errorf("list %s: %w", p, err)
	}
	if len(names) > maxEntries {
		return nil, fmt.Errorf("list %s: more than %d entries: %w", p, maxEntries, core.ErrTooLarge)
	}
	out := make([]core.FileInfo, 0, len(names))
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(int(d.Fd()), n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue // raced with a delete
		}
		full := path.Join(r.alias, rel, n)
		out = append(out, core.FileInfo{
			Path:    full,
			Size:    st.Size,
			Mode:    st.Mode & 0o7777,
			IsDir:   st.Mode&unix.S_IFMT == unix.S_IFDIR,
			ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec),
		})
	}
	return out, nil
}
