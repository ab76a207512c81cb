package cpu

import "sync"

// pool is a fixed set of worker goroutines, sized from GOMAXPROCS, that
// run index ranges of one parallel loop at a time. The calling goroutine
// works too, so a pool of n runs n ranges at once with n-1 goroutines.
type pool struct {
	n     int
	tasks chan task
	wg    sync.WaitGroup // live workers, for Close
}

type task struct {
	fn     func(w, lo, hi int)
	w      int
	lo, hi int
	done   *sync.WaitGroup
}

func newPool(n int) *pool {
	if n < 1 {
		n = 1
	}
	p := &pool{n: n, tasks: make(chan task, 4*n)}
	for i := 1; i < n; i++ {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for t := range p.tasks {
				t.fn(t.w, t.lo, t.hi)
				t.done.Done()
			}
		}()
	}
	return p
}

func (p *pool) close() {
	close(p.tasks)
	p.wg.Wait()
}

// run splits [0,n) into at most p.n contiguous ranges of at least grain
// items and calls fn(w, lo, hi) for each, w being a distinct worker slot in
// [0,p.n) that fn may use to index per-worker scratch memory.
func (p *pool) run(n, grain int, fn func(w, lo, hi int)) {
	if n <= 0 {
		return
	}
	if grain < 1 {
		grain = 1
	}
	parts := min(p.n, (n+grain-1)/grain)
	if parts <= 1 {
		fn(0, 0, n)
		return
	}
	var done sync.WaitGroup
	done.Add(parts - 1)
	chunk, rem := n/parts, n%parts
	lo := 0
	var first [2]int
	for i := range parts {
		hi := lo + chunk
		if i < rem {
			hi++
		}
		if i == 0 {
			first = [2]int{lo, hi}
		} else {
			p.tasks <- task{fn: fn, w: i, lo: lo, hi: hi, done: &done}
		}
		lo = hi
	}
	fn(0, first[0], first[1])
	done.Wait()
}
