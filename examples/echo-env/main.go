// Command echo-env is a minimal external environment plugin for rlhost: it
// asks the policy to repeat a word, and scores the reply by writing it into
// the sandbox the host lent and reading it back with `cat`. It exists to
// show how little an environment plugin needs: it imports only rlhost's
// core SDK and calls envplugin.Serve. It deliberately does nothing useful
// for training.
//
// Build it with `go build -o ./echo-env ./examples/echo-env` and load it by
// path: env "echo" { plugin = "./echo-env" }.
package main

import "github.com/rlhost/rlhost/core/sdk/envplugin"

func main() {
	envplugin.Serve(newEnv())
}
