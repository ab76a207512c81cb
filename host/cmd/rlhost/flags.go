package main

import (
	"github.com/spf13/pflag"

	"github.com/rlhost/rlhost/core/cliflag"
)

func newFlagSet(name, usage string, a *app) *pflag.FlagSet {
	return cliflag.New("rlhost "+name, usage, a.stdout, a.stderr)
}

// parse handles --help (usage on stdout, exit 0) and flag errors (the error
// with a hint on stderr, exit 2) the same way for every command.
func parse(fs *pflag.FlagSet, args []string) (done bool, code int) {
	return cliflag.Parse(fs, args)
}
