package aviato

import (
	"fmt"

	"github.com/rlhost/rlhost/core/labels"
	"github.com/rlhost/rlhost/plugins/backendkit/procowner"
)

// Crash record. ListSandboxesResponse carries no tags, so a sweep cannot
// read a sandbox's owner from a listing; it can only ask for the sandboxes
// of a given owner tag. So each backend process writes one small file,
// before its first Start, naming itself and the service; a later start that
// finds the file's process dead lists that owner's tag, deletes what it
// finds and removes the file. Shutdown removes its own file.

const (
	managedTag = labels.Managed + "=true"
	runTagKey  = labels.Run
	ownerKey   = labels.Prefix + "owner"
)

// ownerTag is the tag that marks o's sandboxes.
func ownerTag(o procowner.Owner) string {
	return fmt.Sprintf("%s=%s/%d/%s", ownerKey, o.Host, o.PID, o.Start)
}

type record struct {
	Owner   procowner.Owner `json:"owner"`
	BaseURL string          `json:"base_url"`
}

func recordPath(dir string, o procowner.Owner) string { return procowner.Records{Dir: dir}.Path(o) }

func writeRecord(dir string, rec record) error {
	r := procowner.Records{Dir: dir}
	return r.Write(r.Path(rec.Owner), rec)
}

// sweepRecords reaps the records of dead owners on host for baseURL.
func sweepRecords(dir, host, baseURL string, reap func(record) (*record, error)) error {
	return procowner.Sweep(procowner.Records{Dir: dir}, host,
		func(r record) procowner.Owner { return r.Owner },
		func(r record) bool { return r.BaseURL == baseURL }, reap)
}
