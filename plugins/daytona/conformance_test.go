package daytona

import (
	"os"
	"testing"

	"github.com/rlhost/rlhost/core/sdk/sandboxplugin"
	"github.com/rlhost/rlhost/core/sdk/sandboxplugin/sandboxtest"
	"github.com/rlhost/rlhost/plugins/daytona/fakedaytona"
)

func TestMain(m *testing.M) {
	if sandboxtest.CrashChild(func() sandboxplugin.Backend { return New() }) {
		return
	}
	os.Exit(m.Run())
}

// TestConformance runs the sandbox backend suite against the wire-level
// fake of Daytona's API. Each test gets its own fake and state dir; a
// second backend in that test (or the suite's crash child) talks to the
// same fake.
func TestConformance(t *testing.T) {
	sandboxtest.Run(t, sandboxtest.Harness{
		New: func() sandboxplugin.Backend { return New() },
		Settings: func(t testing.TB) map[string]any {
			srv := newFake(t, fakedaytona.Options{StartPolls: -1})
			return map[string]any{
				"api_key": srv.APIKey, "api_url": srv.URL, "create_rate": 1000,
				"api_timeout": "10s", "start_timeout": "20s", "state_dir": t.TempDir(),
			}
		},
		Limits: []string{"memory", "output", "disk", "cpus"},
	})
}
