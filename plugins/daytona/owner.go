package daytona

import (
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

// stateFile keeps this process's record on disk, rewriting it atomically on
// every change so a crash at any point leaves a usable file.
type stateFile struct {
	mu    sync.Mutex
	store procowner.Records
	path  string
	rec   stateRecord
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
	return f.flushLocked()
}

func (f *stateFile) remove(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.rec.Sandboxes[name]; !ok {
		return nil
	}
	delete(f.rec.Sandboxes, name)
	return f.flushLocked()
}

// flushLocked writes the record, or removes the file when it is empty.
func (f *stateFile) flushLocked() error {
	if len(f.rec.Sandboxes) == 0 {
		return f.store.Remove(f.path)
	}
	return f.store.Write(f.path, f.rec)
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
