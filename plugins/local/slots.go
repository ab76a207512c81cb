package local

import (
	"errors"
	"sync"

	"github.com/rlhost/rlhost/core"
)

// Two steps of a cold create need no init: reserving the sandbox's state
// entry (a directory, a lock file, flock) and making its cgroups with
// their limits (mkdir in each hierarchy, the limit files; mostly kernel
// work for the memory controller). So the backend prepares them for the
// next sandbox during each create, while that create's init starts up
// (see build), and a create whose limits match starts at the launch. The
// work is the same; it is off the path a caller waits on.
//
// A prepared slot is, on disk, exactly a sandbox that crashed before its
// meta was written: a .new-<id> entry, locked while this process lives,
// and the cgroups cgroupRoot.guess(id) names. List skips it and
// ReapOrphans reaps it after a crash, with no code of its own.

// slotsWanted is how many slots are kept ready: a second one covers two
// creates in quick succession; a burst beyond that takes the plain path.
const slotsWanted = 2

// cgroupShape is what a sandbox's cgroups are made with.
type cgroupShape struct {
	memory int64
	pids   int
	cpus   float64
}

// shapeOf applies the defaults to a spec's limits, as the cgroups get them.
func shapeOf(lim core.Limits) cgroupShape {
	return cgroupShape{
		memory: orDefault(lim.MemoryBytes, defaultMemory),
		pids:   int(orDefault(int64(lim.Pids), defaultPids)),
		cpus:   lim.CPUs,
	}
}

// create makes the cgroups of sandbox id in this shape.
func (s cgroupShape) create(r *cgroupRoot, id string) (*sandboxCgroup, error) {
	return r.create(id, core.Limits{MemoryBytes: s.memory, CPUs: s.cpus}, s.pids)
}

// slot is a sandbox's bookkeeping made before the sandbox is asked for.
type slot struct {
	id    string
	entry *entry
	cg    *sandboxCgroup
	shape cgroupShape
}

func (s *slot) release() error {
	return errors.Join(s.cg.destroy(), s.entry.release())
}

// slots keeps up to slotsWanted slots of one shape ready.
type slots struct {
	mu      sync.Mutex
	ready   []*slot
	filling bool
	closed  bool
	wg      sync.WaitGroup
}

// take returns a ready slot of shape, or nil.
func (q *slots) take(shape cgroupShape) *slot {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, s := range q.ready {
		if s.shape == shape {
			q.ready = append(q.ready[:i], q.ready[i+1:]...)
			return s
		}
	}
	return nil
}

// refill tops the slots up in the background with prepare; one filler
// runs at a time.
func (q *slots) refill(prepare func() (*slot, error)) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.filling || q.closed {
		return
	}
	q.filling = true
	q.wg.Add(1)
	go func() {
		defer q.wg.Done()
		for {
			q.mu.Lock()
			if q.closed || len(q.ready) >= slotsWanted {
				q.filling = false
				q.mu.Unlock()
				return
			}
			q.mu.Unlock()
			s, err := prepare()
			q.mu.Lock()
			if err != nil || q.closed {
				q.filling = false
				q.mu.Unlock()
				if s != nil {
					s.release()
				}
				return // a create that fails the same way reports why
			}
			q.ready = append(q.ready, s)
			q.mu.Unlock()
		}
	}()
}

// close stops refilling and releases every ready slot.
func (q *slots) close() error {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.wg.Wait()
	q.mu.Lock()
	ready := q.ready
	q.ready = nil
	q.mu.Unlock()
	var errs []error
	for _, s := range ready {
		errs = append(errs, s.release())
	}
	return errors.Join(errs...)
}

// busy reports whether a filler is running.
func (q *slots) busy() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.filling
}
