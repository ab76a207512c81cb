package daytona

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/rlhost/rlhost/plugins/backendkit/procowner"
)

// A sandbox is an orphan when its owner (plugins/backendkit/procowner) ran
// on this host and that process is gone. Owners on other hosts are never
// judged from here; the Daytona auto-stop/auto-delete timers collect those.

// stateRecord is the crash record of one backend process: the sandboxes it
// may have alive. Names are written before the create call, ids as soon as
// the API returns them, because a lost create response leaves a sandbox
// that no listing by owner label would tie to its name in time.
type stateRecord struct {
	Owner     procowner.Owner       `json:"owner"`
	APIURL    string                `json:"api_url"`
	RunID     string                `json:"run_id,omitempty"`
	Sandboxes map[string]stateEntry `json:"sandboxes"` // by sandbox name
}

type stateEntry struct {
	ID        string    `json:"id,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// stateFile keeps this process's record on disk as a snapshot of the
// record followed by a journal of changes, one line each: a change costs
// one short append, where rewriting the whole record on every create and
// delete cost time in proportion to the sandboxes alive (with a thousand
// in flight, about a tenth of the backend's CPU). Once the journal holds more
// changes than twice the live entries (and at least compactAfter), it is
// folded into a new snapshot, written atomically. A crash at any point
// leaves a usable file: a torn last line is passed over when it is read.
type stateFile struct {
	mu      sync.Mutex
	store   procowner.Records
	path    string
	rec     stateRecord
	journal *os.File // open for appending after the snapshot; nil while there is no file
	changes int      // lines appended since the snapshot
}

// compactAfter is the fewest journal lines worth a new snapshot.
const compactAfter = 64

// stateChange is one journal line: a sandbox's entry as it now is, or its
// removal.
type stateChange struct {
	Name      string    `json:"name"`
	ID        string    `json:"id,omitempty"`
	CreatedAt time.Time `json:"created_at,omitzero"`
	Removed   bool      `json:"removed,omitempty"`
}

func openState(dir string, o procowner.Owner, apiURL, runID string) (*stateFile, error) {
	store := procowner.Records{Dir: dir}
	if err := store.Create(); err != nil {
		return nil, err
	}
	return &stateFile{
		store: store, path: store.Path(o),
		rec: stateRecord{Owner: o, APIURL: apiURL, RunID: runID, Sandboxes: map[string]stateEntry{}},
	}, nil
}

func (f *stateFile) put(name, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.rec.Sandboxes[name]
	if !ok {
		e.CreatedAt = time.Now().UTC()
	}
	if id != "" {
		e.ID = id
	}
	f.rec.Sandboxes[name] = e
	return f.recordLocked(stateChange{Name: name, ID: e.ID, CreatedAt: e.CreatedAt})
}

func (f *stateFile) remove(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.rec.Sandboxes[name]; !ok {
		return nil
	}
	delete(f.rec.Sandboxes, name)
	if len(f.rec.Sandboxes) == 0 {
		// Nothing left to reap: no file.
		f.closeLocked()
		return f.store.Remove(f.path)
	}
	return f.recordLocked(stateChange{Name: name, Removed: true})
}

// recordLocked appends c to the journal, or writes a new snapshot when
// there is no file yet or the journal has grown long.
func (f *stateFile) recordLocked(c stateChange) error {
	if f.journal == nil || f.changes >= max(compactAfter, 2*len(f.rec.Sandboxes)) {
		return f.snapshotLocked()
	}
	line, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode owner record change: %w", err)
	}
	if _, err := f.journal.Write(append(line, '\n')); err != nil {
		// A short write may have left a torn line, which a reader passes
		// over; a snapshot makes the file whole again.
		return errors.Join(fmt.Errorf("append to owner record: %w", err), f.snapshotLocked())
	}
	f.changes++
	return nil
}

// snapshotLocked writes the whole record atomically and opens it for the
// journal's appends.
func (f *stateFile) snapshotLocked() error {
	f.closeLocked()
	if err := f.store.Write(f.path, f.rec); err != nil {
		return err
	}
	j, err := os.OpenFile(f.path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("open owner record: %w", err)
	}
	f.journal = j
	return nil
}

func (f *stateFile) closeLocked() {
	if f.journal != nil {
		f.journal.Close()
		f.journal = nil
	}
	f.changes = 0
}

// close closes the journal; the file stays for what it still names.
func (f *stateFile) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closeLocked()
}

// DecodeRecord reads a snapshot and the journal after it
// (procowner.RecordDecoder). A plain record, as procowner.Sweep writes
// back, is a snapshot with no journal.
func (r *stateRecord) DecodeRecord(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(r); err != nil {
		return err
	}
	if r.Sandboxes == nil {
		r.Sandboxes = map[string]stateEntry{}
	}
	for {
		var c stateChange
		if dec.Decode(&c) != nil {
			return nil // the end, or a line torn by a crash
		}
		if c.Removed {
			delete(r.Sandboxes, c.Name)
		} else {
			r.Sandboxes[c.Name] = stateEntry{ID: c.ID, CreatedAt: c.CreatedAt}
		}
	}
}

// sweep reaps the records left by dead owners on host for apiURL.
func (f *stateFile) sweep(host, apiURL string, reap func(stateRecord) (*stateRecord, error)) error {
	return procowner.Sweep(f.store, host,
		func(r stateRecord) procowner.Owner { return r.Owner },
		func(r stateRecord) bool { return r.APIURL == apiURL }, reap)
}

// sortedNames returns the record's sandbox names in a stable order.
func (r stateRecord) sortedNames() []string {
	names := make([]string, 0, len(r.Sandboxes))
	for n := range r.Sandboxes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
