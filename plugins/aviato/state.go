package aviato

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/rlhost/rlhost/core/procowner"
)

// Crash record. ListSandboxesResponse carries no tags, so a sweep cannot
// read a sandbox's owner from a listing; it can only ask for the sandboxes
// of a given owner tag. So each backend process writes one small file,
// before its first Start, naming itself and the service; a later start that
// finds the file's process dead lists that owner's tag, deletes what it
// finds and removes the file. Shutdown removes its own file.

const (
	managedTag = "rlhost.managed=true"
	runTagKey  = "rlhost.run"
	ownerKey   = "rlhost.owner"
)

// ownerTag is the tag that marks o's sandboxes.
func ownerTag(o procowner.Owner) string {
	return fmt.Sprintf("%s=%s/%d/%s", ownerKey, o.Host, o.PID, o.Start)
}

type record struct {
	Owner   procowner.Owner `json:"owner"`
	BaseURL string          `json:"base_url"`
}

func recordPath(dir string, o procowner.Owner) string {
	name := strings.Map(func(r rune) rune {
		if r == '-' || r == '.' || r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			return r
		}
		return '_'
	}, o.Host)
	return filepath.Join(dir, fmt.Sprintf("%s-%d.json", name, o.PID))
}

func writeRecord(dir string, rec record) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create state dir %s: %w", dir, err)
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	p := recordPath(dir, rec.Owner)
	if err := os.WriteFile(p+".tmp", b, 0o600); err != nil {
		return fmt.Errorf("write owner record: %w", err)
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		return fmt.Errorf("write owner record: %w", err)
	}
	return nil
}

// deadRecords returns the records of dead owners on host for baseURL, by
// file path.
func deadRecords(dir, host, baseURL string) (map[string]record, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read state dir %s: %w", dir, err)
	}
	out := map[string]record{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var rec record
		if json.Unmarshal(b, &rec) != nil || rec.BaseURL != baseURL || !rec.Owner.Dead(host) {
			continue
		}
		out[p] = rec
	}
	return out, nil
}

func defaultStateDir() (string, error) {
	if x := os.Getenv("XDG_STATE_HOME"); x != "" {
		return filepath.Join(x, "rlhost", "aviato"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("locate the state directory: %w", err)
	}
	return filepath.Join(home, ".local", "state", "rlhost", "aviato"), nil
}
