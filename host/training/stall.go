package training

import "fmt"

// stallSteps is how many steps in a row with no group whose rewards
// differ make the run warn: GRPO learns only from differences within a
// group, so from there on nothing can change unless sampling does.
const stallSteps = 3

// stallWatch counts steps in a row whose every group scored alike, and
// says when to warn: once per such streak, at its stallSteps-th step.
type stallWatch struct{ run int }

// observe records one trained-on step; flat is true when no group's
// rewards differed. It returns the warning to print, or "".
func (w *stallWatch) observe(flat bool, rewardMean float64) string {
	if !flat {
		w.run = 0
		return ""
	}
	w.run++
	if w.run != stallSteps {
		return ""
	}
	return fmt.Sprintf("%d steps in a row without an update: in every group all completions scored alike "+
		"(mean reward %.3f), so GRPO has nothing to learn from. If the reward fell to this, the policy "+
		"collapsed: lower trainer.learning_rate, and start again from the last good checkpoint's model/ "+
		"(policy model = \"OUT/checkpoints/step-NNNNNN/model\"). If it never moved, the tasks are too hard or "+
		"too easy for this policy: raise run.group_size or policy.temperature.", stallSteps, rewardMean)
}
