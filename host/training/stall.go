package training

import "fmt"

// stallSteps is how many steps in a row in which every completion scored
// the same make the run warn: GRPO learns only from differences within a
// group, so from there on nothing changes unless sampling happens to.
const stallSteps = 3

// stallWatch counts steps in a row whose completions all scored the same
// and says when to warn: once per such streak, at its stallSteps-th step.
// Steps whose groups each agree but differ from one another (some tasks
// always solved, others never: a converged run) are not a stall, nor is a
// run that rose to its best reward and scores it on every completion.
type stallWatch struct {
	run       int
	best, low float64 // the highest and lowest step mean reward so far
	seen      bool
}

// observe records one step: uniform is true when all of its completions
// scored the same, mean is its mean reward. It returns the warning to
// print, or "".
func (w *stallWatch) observe(uniform bool, mean float64) string {
	fell, rose := w.seen && mean < w.best, w.seen && mean >= w.best && w.low < mean
	if !w.seen {
		w.best, w.low, w.seen = mean, mean, true
	}
	w.best, w.low = max(w.best, mean), min(w.low, mean)
	if !uniform {
		w.run = 0
		return ""
	}
	w.run++
	if w.run != stallSteps || rose {
		return ""
	}
	head := fmt.Sprintf("%d steps in a row in which every completion scored %.3f: GRPO has nothing to learn from. ", stallSteps, mean)
	if fell {
		return head + fmt.Sprintf("The reward fell from %.3f, so the policy collapsed: lower trainer.learning_rate and "+
			"start again from the last good checkpoint's model (policy model = \"OUT/checkpoints/step-NNNNNN/model\").", w.best)
	}
	return head + "It never moved: the tasks are too hard (or too easy) for this policy, or its samples too alike: " +
		"warm it up, or raise run.group_size or policy.temperature."
}
