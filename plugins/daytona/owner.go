package daytona

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// owner identifies the process that created a sandbox. A sandbox is an
// orphan when its owner ran on this host and that process is gone: the pid
// is not alive, or it is alive but started at another time (pid reuse) or
// in another boot. Owners on other hosts are never judged from here; the
// Daytona auto-stop/auto-delete timers collect those.
type owner struct {
	Host  string `json:"host"`
	PID   int    `json:"pid"`
	Start string `json:"start,omitempty"` // "<boot id prefix>/<start ticks>"; "" when unknown
}

func currentOwner() owner {
	host, _ := os.Hostname()
	pid := os.Getpid()
	return owner{Host: host, PID: pid, Start: processStart(pid)}
}

func (o owner) labels() map[string]string {
	return map[string]string{
		ownerHostLabel:  o.Host,
		ownerPIDLabel:   strconv.Itoa(o.PID),
		ownerStartLabel: o.Start,
	}
}

func ownerFromLabels(l map[string]string) (owner, bool) {
	pid, err := strconv.Atoi(l[ownerPIDLabel])
	if err != nil || pid <= 0 || l[ownerHostLabel] == "" {
		return owner{}, false
	}
	return owner{Host: l[ownerHostLabel], PID: pid, Start: l[ownerStartLabel]}, true
}

func (o owner) String() string { return fmt.Sprintf("pid %d on %s", o.PID, o.Host) }

// dead reports whether o is a process of host that no longer runs.
func (o owner) dead(host string) bool {
	if o.Host != host || o.PID <= 0 {
		return false
	}
	if err := syscall.Kill(o.PID, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return true
	}
	if o.Start == "" {
		return false
	}
	now := processStart(o.PID)
	return now != "" && now != o.Start
}

// processStart returns a token that changes when pid is reused or the
// machine reboots, or "" where /proc is not available.
func processStart(pid int) string {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	ticks, ok := parseStatStart(string(stat))
	if !ok {
		return ""
	}
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	b := strings.TrimSpace(string(boot))
	if len(b) > 8 {
		b = b[:8]
	}
	return b + "/" + ticks
}

// parseStatStart returns field 22 (starttime) of /proc/<pid>/stat. The
// command name (field 2) is in parentheses and may hold spaces and ')', so
// fields are counted from the last ')'.
func parseStatStart(stat string) (string, bool) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return "", false
	}
	f := strings.Fields(stat[i+1:])
	// After ")" come fields 3.. ; starttime is field 22, so index 19.
	if len(f) < 20 {
		return "", false
	}
	if _, err := strconv.ParseUint(f[19], 10, 64); err != nil {
		return "", false
	}
	return f[19], true
}

// stateRecord is the crash record of one backend process: the sandboxes it
// may have alive. Names are written before the create call, ids as soon as
// the API returns them.
type stateRecord struct {
	Owner     owner                 `json:"owner"`
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
	mu   sync.Mutex
	path string
	rec  stateRecord
}

func openState(dir string, o owner, apiURL, runID string) (*stateFile, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create state dir %s: %w", dir, err)
	}
	name := fmt.Sprintf("%s-%d.json", sanitize(o.Host), o.PID)
	return &stateFile{
		path: filepath.Join(dir, name),
		rec:  stateRecord{Owner: o, APIURL: apiURL, RunID: runID, Sandboxes: map[string]stateEntry{}},
	}, nil
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '-' || r == '.' || r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			return r
		}
		return '_'
	}, s)
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
		if err := os.Remove(f.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove state file: %w", err)
		}
		return nil
	}
	return writeRecord(f.path, f.rec)
}

func writeRecord(path string, rec stateRecord) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write state file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write state file: %w", err)
	}
	return nil
}

// deadRecords loads the records in dir left by dead owners on host for
// apiURL. Unreadable files are skipped: the label sweep still covers them.
func deadRecords(dir, host, apiURL string) (map[string]stateRecord, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read state dir %s: %w", dir, err)
	}
	out := map[string]stateRecord{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var rec stateRecord
		if json.Unmarshal(b, &rec) != nil || rec.APIURL != apiURL || !rec.Owner.dead(host) {
			continue
		}
		out[p] = rec
	}
	return out, nil
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
