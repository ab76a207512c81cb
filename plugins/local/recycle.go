package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/plugins/local/sandboxinit"
)

// recycle is Destroy under the recycle setting, called by destroyOwned
// (which makes it the only teardown of sb): instead of tearing the
// sandbox down, its init resets it (every process killed, its writable
// file systems replaced by empty ones, IPC objects removed) and it goes
// back to the pool under a new id, its labels and TTL dropped, for the
// next Create of the block's spec. It reports false, having done nothing,
// when the sandbox does not qualify (another spec, a dead init, a full
// pool), and the caller destroys it. A reset that fails destroys it here.
//
// The id changes so that nothing keyed by the old one (the host's records,
// `rlhost sandbox rm`, a second Destroy) can reach the sandbox's next user.
func (b *Backend) recycle(sb *sandbox) (bool, error) {
	set, st, err := b.settings()
	if err != nil || !set.recycle {
		return false, nil
	}
	nb, ok := sb.impl.(*nsBox)
	if !ok || !nb.alive() || !sameShape(sb.spec, b.spec) {
		return false, nil
	}
	b.mu.Lock()
	if b.closed || b.boxes[sb.meta.ID] != sb || len(b.pool)+b.recycling >= b.keepMax() {
		b.mu.Unlock()
		return false, nil
	}
	delete(b.boxes, sb.meta.ID)
	b.recycling++
	b.recycleWG.Add(1)
	b.mu.Unlock()
	defer b.recycleWG.Done()

	next := &sandbox{spec: b.spec, entry: sb.entry, impl: sb.impl}
	next.meta = sb.meta
	next.meta.ID, next.meta.Labels, next.meta.Expires, next.meta.CreatedAt = newID(), nil, time.Time{}, time.Now().UTC()
	// Its calls were cancelled (destroyOwned closed sb); every one must
	// have had its answer before the reset, or what it does could land
	// in the next user's sandbox.
	if sb.drained(callsDrainTimeout) {
		err = b.resetInto(st, next, nb)
	} else {
		err = fmt.Errorf("recycle: calls still running %v after they were cancelled", callsDrainTimeout)
	}
	b.mu.Lock()
	b.recycling--
	keep := err == nil && !b.closed && len(b.pool) < b.keepMax()
	if keep {
		b.pool = append(b.pool, next)
	}
	b.mu.Unlock()
	if err != nil {
		b.warnResetFailed(sb.meta.ID, err)
	}
	if !keep {
		// A sandbox that could not be reset is destroyed instead, which is
		// all Destroy promised: only that can fail it.
		err = errors.Join(next.impl.stop(), next.entry.release())
		b.live.Put()
		b.kickPool()
	}
	if err != nil {
		return true, fmt.Errorf("local backend: destroy %s: %w", sb.meta.ID, err)
	}
	return true, nil
}

// callsDrainTimeout bounds how long a recycle waits for the cancelled
// calls of a sandbox's last user; the sandbox is destroyed instead.
const callsDrainTimeout = 5 * time.Second

// resetInto moves the sandbox's record to its new id first (so the old id
// is gone before anything else happens), then resets it.
func (b *Backend) resetInto(st *stateDir, next *sandbox, nb *nsBox) error {
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

// sameShape reports whether a sandbox made for spec can serve a Create of
// want: everything but the labels and the TTL, which adopt sets.
func sameShape(spec, want core.SandboxSpec) bool {
	a, c := spec, want
	a.Labels, c.Labels, a.TTL, c.TTL = nil, nil, 0, 0
	return reflect.DeepEqual(a, c)
}

// warnResetFailed says, once per backend, that a reset failed: each such
// sandbox is destroyed and the next one created, so recycling silently
// stopped working would cost a create per episode.
func (b *Backend) warnResetFailed(id string, err error) {
	b.mu.Lock()
	first := !b.resetWarned
	b.resetWarned = true
	b.mu.Unlock()
	if first {
		fmt.Fprintf(os.Stderr, "rlhost local backend: %s: %v; destroyed instead of reused (said once)\n", id, err)
	}
}
