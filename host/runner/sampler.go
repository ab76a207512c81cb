package runner

import (
	"math/rand/v2"

	"github.com/rlhost/rlhost/core"
)

// sampler walks the tasks in a seeded random order, reshuffling each epoch,
// so every task is seen once per epoch and runs are reproducible.
type sampler struct {
	tasks []core.Task
	order []int
	pos   int
	rng   *rand.Rand
}

func newSampler(tasks []core.Task, seed int64) *sampler {
	s := &sampler{tasks: tasks, rng: rand.New(rand.NewPCG(uint64(seed), 0x726c686f7374))}
	s.shuffle()
	return s
}

func (s *sampler) shuffle() {
	s.order = s.rng.Perm(len(s.tasks))
	s.pos = 0
}

func (s *sampler) next(n int) []core.Task {
	out := make([]core.Task, 0, n)
	for len(out) < n {
		if s.pos == len(s.order) {
			s.shuffle()
		}
		out = append(out, s.tasks[s.order[s.pos]])
		s.pos++
	}
	return out
}
