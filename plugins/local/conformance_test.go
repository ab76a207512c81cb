package local

import (
	"testing"

	"github.com/rlhost/rlhost/core/sandboxplugin"
	"github.com/rlhost/rlhost/core/sandboxplugin/sandboxtest"
)

func newForSuite() sandboxplugin.Backend { return New() }

// TestConformance runs the sandbox backend suite in both isolation modes.
func TestConformance(t *testing.T) {
	tests := []struct {
		isolation string
		limits    []string
	}{
		{"none", []string{"cpu_time", "file_size", "open_files", "output"}},
		{"namespaces", []string{"memory", "cpu_time", "pids", "file_size", "open_files", "tmp", "output", "disk", "cpus"}},
	}
	for _, tt := range tests {
		t.Run(tt.isolation, func(t *testing.T) {
			sandboxtest.Run(t, sandboxtest.Harness{
				New: newForSuite,
				Settings: func(t testing.TB) map[string]any {
					return map[string]any{"isolation": tt.isolation, "state_dir": t.TempDir()}
				},
				Limits: tt.limits,
			})
		})
	}
}
