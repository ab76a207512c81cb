package main

import (
	"context"

	"github.com/rlhost/rlhost/trainer/cli/modelcmd"
	"github.com/rlhost/rlhost/trainer/cli/tokenizecmd"
)

func (a *app) cmdModel(ctx context.Context, args []string) int {
	return modelcmd.Main(ctx, args, a.stdout, a.stderr)
}

func (a *app) cmdTokenize(ctx context.Context, args []string) int {
	return tokenizecmd.Main(ctx, args, a.stdout, a.stderr)
}
