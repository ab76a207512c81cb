package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/plugins/local/sandboxinit"
)

// Recycling: instead of tearing a destroyed sandbox down, its init resets
// it (every process killed, its writable file systems replaced by empty
// ones, IPC objects removed) and it serves the next Create of the block's
// spec under a new id, its labels and TTL dropped. The id changes so that
// nothing keyed by the old one (the host's records, `rlhost sandbox rm`,
// a second Destroy) can reach the sandbox's next user. The backend decides
// when (Backend.recycle); what a reset is lives here.

// recyclable reports whether sb can be reset for a Create of spec: a
// namespaced sandbox whose init lives, made for spec.
func recyclable(sb *sandbox, spec core.SandboxSpec) bool {
	nb, ok := sb.impl.(*nsBox)
	return ok && nb.alive() && sameShape(sb.spec, spec)
}

// renew resets sb, whose user destroyed it and whose calls were cancelled,
// into next, the fresh sandbox of spec it becomes, recorded in st under a
// new id. On failure next is still what must be torn down.
func renew(st *stateDir, sb *sandbox, spec core.SandboxSpec) (next *sandbox, err error) {
	next = &sandbox{spec: spec, entry: sb.entry, impl: sb.impl}
	next.meta = sb.meta
	next.meta.ID, next.meta.Labels, next.meta.Expires, next.meta.CreatedAt = newID(), nil, time.Time{}, time.Now().UTC()
	// Every cancelled call must have had its answer before the reset, or
	// what it does could land in the next user's sandbox.
	if !sb.drained(callsDrainTimeout) {
		return next, fmt.Errorf("recycle: calls still running %v after they were cancelled", callsDrainTimeout)
	}
	return next, resetInto(st, next, sb.impl.(*nsBox))
}

// callsDrainTimeout bounds how long a recycle waits for the cancelled
// calls of a sandbox's last user; the sandbox is destroyed instead.
const callsDrainTimeout = 5 * time.Second

// resetInto moves the sandbox's record to its new id first (so the old id
// is gone before anything else happens), then resets it.
func resetInto(st *stateDir, next *sandbox, nb *nsBox) error {
	final := filepath.Join(st.root, next.meta.ID)
	if err := os.Rename(next.entry.dir, final); err != nil {
		return fmt.Errorf("recycle: move record: %w", err)
	}
	next.entry.dir = final
	if err := writeMeta(final, next.meta); err != nil {
		return fmt.Errorf("recycle: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := nb.call(ctx, sandboxinit.Request{Op: "reset"}); err != nil {
		return fmt.Errorf("recycle: reset: %w", err)
	}
	return nil
}
