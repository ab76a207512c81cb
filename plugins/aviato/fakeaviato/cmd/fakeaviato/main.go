// Command fakeaviato serves the fake Aviato ATCService on a loopback port
// until interrupted, for trying `rlhost run` with backend = "aviato" by hand:
//
//	go run ./plugins/aviato/fakeaviato/cmd/fakeaviato
//
// It prints the environment to export. Sandboxes are local-backend
// sandboxes on this machine, whatever image is asked for.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/rlhost/rlhost/plugins/aviato/fakeaviato"
	"github.com/rlhost/rlhost/plugins/local"
)

func main() {
	// This binary is also the init of its local sandboxes.
	if local.Reexec() {
		return
	}
	polls := flag.Int("start-polls", 2, "Gets a new sandbox answers PENDING or CREATING before RUNNING")
	quota := flag.Int("max-sandboxes", 0, "live sandboxes before Start answers RESOURCE_EXHAUSTED; 0 = no cap")
	flag.Parse()
	s, err := fakeaviato.New(fakeaviato.Options{StartPolls: *polls, MaxSandboxes: *quota})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer s.Close()
	fmt.Printf("export CWSANDBOX_BASE_URL=%s CWSANDBOX_API_KEY=%s\n", s.URL, fakeaviato.DefaultAPIKey)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	fmt.Fprintf(os.Stderr, "fakeaviato: %d starts, %d sandboxes left\n", s.Starts(), len(s.Sandboxes()))
}
