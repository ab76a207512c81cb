package main

import (
	"context"

	"github.com/rlhost/rlhost/trainer/cli/tokenizecmd"
)

// Placeholder until the model CLI lands.
func (a *app) cmdModel(ctx context.Context, args []string) int {
	a.errorf("model: not built yet")
	return 1
}

func (a *app) cmdTokenize(ctx context.Context, args []string) int {
	return tokenizecmd.Main(ctx, args, a.stdout, a.stderr)
}
