package procowner

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rlhost/rlhost/core/labels"
)

// Labels are o as sandbox labels (labels.OwnerHost, OwnerPID, OwnerStart),
// for services whose listings carry labels.
func (o Owner) Labels() map[string]string {
	return map[string]string{labels.OwnerHost: o.Host, labels.OwnerPID: strconv.Itoa(o.PID), labels.OwnerStart: o.Start}
}

// FromLabels reads an owner written by Labels; ok is false when the labels
// name none.
func FromLabels(l map[string]string) (Owner, bool) {
	pid, err := strconv.Atoi(l[labels.OwnerPID])
	if err != nil || pid <= 0 || l[labels.OwnerHost] == "" {
		return Owner{}, false
	}
	return Owner{Host: l[labels.OwnerHost], PID: pid, Start: l[labels.OwnerStart]}, true
}

// Records is a directory of crash records, one JSON file per owner process
// (HOST-PID.json), for backends whose service cannot list a sandbox's owner
// or may lose a create's answer: the record names what the process may
// have alive, and the next start sweeps the records of dead owners.
type Records struct{ Dir string }

// Path is o's record file.
func (r Records) Path(o Owner) string {
	host := strings.Map(func(c rune) rune {
		if c == '-' || c == '.' || c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') {
			return c
		}
		return '_'
	}, o.Host)
	return filepath.Join(r.Dir, fmt.Sprintf("%s-%d.json", host, o.PID))
}

// Create makes the directory (0700: records name hosts and pids), so that
// a bad directory fails when a backend is configured, not at its first
// sandbox.
func (r Records) Create() error {
	if err := os.MkdirAll(r.Dir, 0o700); err != nil {
		return fmt.Errorf("create state dir %s: %w", r.Dir, err)
	}
	return nil
}

// Write stores v at path atomically (a crash leaves the old file or the
// new one, never half of one), creating the directory if needed.
func (r Records) Write(path string, v any) error {
	if err := r.Create(); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode owner record: %w", err)
	}
	if err := os.WriteFile(path+".tmp", b, 0o600); err != nil {
		return fmt.Errorf("write owner record: %w", err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return fmt.Errorf("write owner record: %w", err)
	}
	return nil
}

// Remove deletes the record at path; a missing one is not an error.
func (r Records) Remove(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove owner record: %w", err)
	}
	return nil
}

// Dead loads, by path, the records in dir whose owner ran on host and is
// gone and that keep accepts (the same service, say). owner reads a
// record's owner. Unreadable files are passed over: they may be another
// process's half-written .tmp, and a backend's label sweep covers the rest.
func Dead[T any](r Records, host string, owner func(T) Owner, keep func(T) bool) (map[string]T, error) {
	entries, err := os.ReadDir(r.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read state dir %s: %w", r.Dir, err)
	}
	out := map[string]T{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		p := filepath.Join(r.Dir, e.Name())
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var rec T
		if decodeRecord(b, &rec) != nil || !owner(rec).Dead(host) || (keep != nil && !keep(rec)) {
			continue
		}
		out[p] = rec
	}
	return out, nil
}

// RecordDecoder is a record kept in a format of its own, such as a
// snapshot followed by a journal of changes; Dead reads it with
// DecodeRecord rather than as one JSON value. The format must still accept
// the JSON value Write stores, which Sweep writes back.
type RecordDecoder interface {
	DecodeRecord(b []byte) error
}

func decodeRecord[T any](b []byte, rec *T) error {
	if d, ok := any(rec).(RecordDecoder); ok {
		return d.DecodeRecord(b)
	}
	return json.Unmarshal(b, rec)
}

// Sweep reaps the records of dead owners that Dead finds: reap deletes
// what one record names and returns the record of what it could not delete
// (nil when nothing is left) and the errors it met. A record left with
// nothing is removed; otherwise it is rewritten with what is left, for the
// next sweep. Records are visited in no particular order.
func Sweep[T any](r Records, host string, owner func(T) Owner, keep func(T) bool, reap func(rec T) (left *T, err error)) error {
	recs, err := Dead(r, host, owner, keep)
	if err != nil {
		return err
	}
	var errs []error
	for p, rec := range recs {
		left, err := reap(rec)
		if err != nil {
			errs = append(errs, err)
		}
		if left == nil {
			if err := r.Remove(p); err != nil {
				errs = append(errs, err)
			}
		} else if err := r.Write(p, *left); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
