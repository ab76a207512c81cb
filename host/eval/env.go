package eval

import (
	"context"
	"fmt"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/host/runner"
)

// TrainingEnv is an env whose task list leaves out the held-out tasks, so
// that a training run never samples them; everything else is the env's.
type TrainingEnv struct {
	runner.Env
	Settings *Settings
}

// Tasks returns the env's tasks that are not held out.
func (e TrainingEnv) Tasks(ctx context.Context) ([]core.Task, error) {
	tasks, err := e.Env.Tasks(ctx)
	if err != nil {
		return nil, err
	}
	train, _, err := e.Settings.Split(tasks)
	return train, err
}

// HeldOut returns the env's held-out tasks.
func HeldOut(ctx context.Context, env runner.Env, s *Settings) ([]core.Task, error) {
	tasks, err := env.Tasks(ctx)
	if err != nil {
		return nil, fmt.Errorf("eval: %w", err)
	}
	_, held, err := s.Split(tasks)
	return held, err
}
