package local

import (
	"maps"
	"testing"

	"github.com/rlhost/rlhost/core/sdk/sandboxplugin"
	"github.com/rlhost/rlhost/core/sdk/sandboxplugin/sandboxtest"
)

func newForSuite() sandboxplugin.Backend { return New() }

// TestConformance runs the sandbox backend suite in both isolation modes,
// and with recycled sandboxes.
func TestConformance(t *testing.T) {
	all := []string{"memory", "cpu_time", "pids", "file_size", "open_files", "tmp", "output", "disk", "cpus"}
	tests := []struct {
		name, isolation string
		extra           map[string]any
		limits          []string
	}{
		{"none", "none", nil, []string{"cpu_time", "file_size", "open_files", "output"}},
		// The default: sandboxes of the block's spec come back from a reset.
		{"namespaces", "namespaces", nil, all},
		{"namespaces-pool", "namespaces", map[string]any{"pool_size": 2}, all},
		// Every sandbox created and torn down.
		{"namespaces-fresh", "namespaces", map[string]any{"recycle": false}, all},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sandboxtest.Run(t, sandboxtest.Harness{
				New: newForSuite,
				Settings: func(t testing.TB) map[string]any {
					s := map[string]any{"isolation": tt.isolation, "state_dir": t.TempDir()}
					maps.Copy(s, tt.extra)
					return s
				},
				Limits: tt.limits,
			})
		})
	}
}
