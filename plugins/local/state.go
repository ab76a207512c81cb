package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/plugins/backendkit/procowner"
)

// The state directory records every sandbox so that other processes (the
// `rlhost sandbox` commands, the next run after a crash) can list, destroy
// and reap them:
//
//	<state>/sandboxes/<id>/lock       flock'ed by the owning process while it lives
//	<state>/sandboxes/<id>/meta.json  labels, init pid, cgroup, ...
//	<state>/sandboxes/<id>/workspace  the workspace when workspace = "host"
//
// A sandbox is first built as .new-<id> and renamed into place once its
// lock is held, so a lock that can be taken always means a dead owner.

type meta struct {
	ID        string            `json:"id"`
	Labels    map[string]string `json:"labels,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
	Isolation string            `json:"isolation"`
	OwnerPID  int               `json:"owner_pid"`
	InitPID   int               `json:"init_pid,omitempty"`      // host pid of the sandbox init
	InitStart string            `json:"init_start_id,omitempty"` // procowner.ProcessStart: against pid reuse and reboots
	Cgroup    *sandboxCgroup    `json:"cgroup,omitempty"`
	HostUID   int               `json:"host_uid,omitempty"` // uid sandbox root maps to
	Expires   time.Time         `json:"expires,omitzero"`
}

func (m meta) info(state string) core.SandboxInfo {
	return core.SandboxInfo{ID: m.ID, Backend: "local", Labels: m.Labels, State: state,
		CreatedAt: m.CreatedAt, Isolation: m.Isolation}
}

type stateDir struct{ root string }

func openStateDir(dir string) (*stateDir, error) {
	sb := filepath.Join(dir, "sandboxes")
	if err := os.MkdirAll(sb, 0o711); err != nil {
		return nil, fmt.Errorf("state dir %s: %w", dir, err)
	}
	// Searchable but not listable: a sandbox init binds its host workspace
	// (0700, its own uid) by path; sandbox ids are unguessable, and inside a
	// sandbox the whole state dir is covered by an empty tmpfs.
	for _, d := range []string{dir, sb} {
		if err := os.Chmod(d, 0o711); err != nil {
			return nil, fmt.Errorf("state dir %s: %w", d, err)
		}
	}
	return &stateDir{root: sb}, nil
}

// entry is one sandbox's directory, with its lock held while lock != nil.
type entry struct {
	dir  string
	lock *os.File
}

// reserve creates the directory of a new sandbox and takes its lock.
func (s *stateDir) reserve(id string) (*entry, error) {
	dir := filepath.Join(s.root, ".new-"+id)
	if err := os.Mkdir(dir, 0o711); err != nil {
		return nil, fmt.Errorf("state: reserve %s: %w", id, err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("state: lock %s: %w", id, err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("state: lock %s: %w", id, err)
	}
	return &entry{dir: dir, lock: lock}, nil
}

// publish moves a reserved entry, its meta written, into place.
func (s *stateDir) publish(e *entry, id string) error {
	final := filepath.Join(s.root, id)
	if e.dir != final {
		if err := os.Rename(e.dir, final); err != nil {
			return fmt.Errorf("state: publish %s: %w", id, err)
		}
		e.dir = final
	}
	return nil
}

func writeMeta(dir string, m meta) error {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("state: encode meta of %s: %w", m.ID, err)
	}
	tmp := filepath.Join(dir, "meta.json.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("state: write meta of %s: %w", m.ID, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "meta.json")); err != nil {
		return fmt.Errorf("state: write meta of %s: %w", m.ID, err)
	}
	return nil
}

// release removes the entry's directory and drops its lock.
func (e *entry) release() error {
	err := os.RemoveAll(e.dir)
	if e.lock != nil {
		e.lock.Close()
		e.lock = nil
	}
	if err != nil {
		return fmt.Errorf("state: remove %s: %w", e.dir, err)
	}
	return nil
}

// record is an entry as another process sees it.
type record struct {
	dir   string
	meta  meta
	owned bool // someone holds the lock
}

// scan reads every entry. Entries whose meta is unreadable get a meta with
// just the ID, so they can still be reaped.
func (s *stateDir) scan() ([]record, error) {
	ents, err := os.ReadDir(s.root)
	if err != nil {
		return nil, fmt.Errorf("state: list %s: %w", s.root, err)
	}
	var out []record
	for _, de := range ents {
		if !de.IsDir() {
			continue
		}
		dir := filepath.Join(s.root, de.Name())
		r := record{dir: dir, meta: meta{ID: strings.TrimPrefix(de.Name(), ".new-")}}
		if b, err := os.ReadFile(filepath.Join(dir, "meta.json")); err == nil {
			json.Unmarshal(b, &r.meta)
		}
		r.owned = lockHeld(filepath.Join(dir, "lock"))
		out = append(out, r)
	}
	return out, nil
}

// lockHeld reports whether a live process holds the lock file. A missing
// lock file counts as held for a moment (an entry being reserved).
func lockHeld(path string) bool {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		// No lock file yet: held only if the entry is being reserved right now.
		st, serr := os.Stat(filepath.Dir(path))
		return serr == nil && time.Since(st.ModTime()) < 10*time.Second
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return true
	}
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return false
}

// destroyRecord tears down a sandbox from its record alone: the path for
// sandboxes of other (live or dead) processes.
func destroyRecord(r record) error {
	var errs []error
	if procowner.Running(r.meta.InitPID, r.meta.InitStart) {
		syscall.Kill(r.meta.InitPID, syscall.SIGKILL)
	}
	if err := r.meta.Cgroup.destroy(); err != nil {
		errs = append(errs, err)
	}
	if err := removeTree(r.dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// removeTree removes a directory, retrying briefly while a dying sandbox
// still has files open in it.
func removeTree(dir string) error {
	var err error
	for try := 0; try < 50; try++ {
		if err = os.RemoveAll(dir); err == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("state: remove %s: %w", dir, err)
}
