package main

import "context"

// Placeholder until the trainer CLI packages land.
func (a *app) cmdModel(ctx context.Context, args []string) int {
	a.errorf("model: not built yet")
	return 1
}

func (a *app) cmdTokenize(ctx context.Context, args []string) int {
	a.errorf("tokenize: not built yet")
	return 1
}
