package aviato

import (
	"testing"

	"github.com/rlhost/rlhost/core/sdk/sandboxplugin"
	"github.com/rlhost/rlhost/core/sdk/sandboxplugin/sandboxtest"
	"github.com/rlhost/rlhost/plugins/aviato/fakeaviato"
)

func newForSuite() sandboxplugin.Backend { return New() }

// TestConformance runs the sandbox backend suite against the wire-level
// fake of Aviato's service.
func TestConformance(t *testing.T) {
	sandboxtest.Run(t, sandboxtest.Harness{
		New: newForSuite,
		Settings: func(t testing.TB) map[string]any {
			srv, err := fakeaviato.New(fakeaviato.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(srv.Close)
			return map[string]any{"api_url": srv.URL, "api_key": fakeaviato.DefaultAPIKey, "state_dir": t.TempDir()}
		},
		Limits: []string{"memory", "output", "cpus"},
	})
}
