// Package labels names the labels rlhost puts on sandboxes, in one place,
// so the host, every backend and `rlhost sandbox` agree on them, and offers
// the matching rule List uses.
//
// It does not decide which labels a backend can store or how: cloud
// backends map them onto their own labels or tags.
package labels

import "strings"

// Prefix marks labels rlhost sets itself; a config may not set them.
const Prefix = "rlhost."

// The labels rlhost sets.
const (
	Run       = Prefix + "run"       // the run id; the host sets it on every sandbox of a run
	Env       = Prefix + "env"       // the env block a sandbox serves
	Episode   = Prefix + "episode"   // the episode a sandbox serves
	Preflight = Prefix + "preflight" // a sandbox made by `rlhost validate --preflight`
	// Managed marks a sandbox rlhost made, on services shared with other
	// tools: a backend deletes only sandboxes that carry it.
	Managed = Prefix + "managed"
	// The owner process (see plugins/backendkit/procowner), for sweeps
	// that read owners from labels.
	OwnerHost  = Prefix + "owner.host"
	OwnerPID   = Prefix + "owner.pid"
	OwnerStart = Prefix + "owner.start"
)

// Reserved says whether k is a label only rlhost may set.
func Reserved(k string) bool { return strings.HasPrefix(k, Prefix) }

// Match says whether have includes every label of want with the same
// value; an empty want matches everything.
func Match(have, want map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}
