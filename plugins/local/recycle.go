package local

import (
	"context"
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
	err = b.resetInto(st, next, nb)
	b.mu.Lock()
	b.recycling--
	keep := err == nil && !b.closed && len(b.pool) < b.keepMax()
	if keep {
		b.pool = append(b.pool, next)
	}
	b.mu.Unlock()
	if !keep {
		next.impl.stop()
		next.entry.release()
		b.live.Put()
		b.kickPool()
	}
	if err != nil {
		return true, fmt.Errorf("local backend: destroy %s: %w", sb.meta.ID, err)
	}
	return true, nil
}

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
