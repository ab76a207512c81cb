// Command fakedaytona serves the fake Daytona API on a loopback port until
// interrupted, for trying `rlhost run` with backend = "daytona" by hand:
//
//	go run ./plugins/daytona/fakedaytona/cmd/fakedaytona
//
// It prints the api_url and api_key to put in the sandbox block. Commands
// run on this machine, unisolated: use it with trusted tasks only.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/rlhost/rlhost/plugins/daytona/fakedaytona"
)

func main() {
	delay := flag.Duration("exec-delay", 0, "delay every exec by this long (to try timeouts and Ctrl-C)")
	polls := flag.Int("start-polls", 1, "GETs a new sandbox stays \"creating\"")
	flag.Parse()
	s, err := fakedaytona.New(fakedaytona.Options{StartPolls: *polls})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer s.Close()
	s.SetExecDelay(*delay)
	fmt.Printf("api_url = %q\napi_key = %q\n", s.URL, s.APIKey)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	fmt.Fprintf(os.Stderr, "fakedaytona: %d creates, %d sandboxes left\n", s.Creates(), len(s.Sandboxes()))
}
