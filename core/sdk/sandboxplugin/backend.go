package sandboxplugin

import (
	"context"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/core/sdk/pluginbase"
)

// Backend is what a sandbox backend plugin implements. One plugin process
// serves one `sandbox` block of the config, and manages every sandbox created
// from it. All methods must be safe for concurrent use.
type Backend interface {
	// Info is static: name, version and the config schema.
	Info() pluginbase.Info

	// Configure receives the decoded backend-specific config and the common
	// sandbox spec of the block. It must reject (with a Path) any setting the
	// backend cannot honour rather than ignore it.
	Configure(ctx context.Context, cfg schema.Config, spec core.SandboxSpec) schema.Diagnostics

	// Create makes a sandbox and returns once it can run commands. The host
	// merges its own labels (run id, ...) into spec.Labels.
	Create(ctx context.Context, spec core.SandboxSpec) (core.SandboxInfo, error)

	// The calls on one existing sandbox: Exec, ReadFile, WriteFile and
	// ListFiles (see core.SandboxOps). Relative paths are relative to the
	// workspace.
	core.SandboxOps

	// Destroy removes the sandbox and everything in it. Destroying an unknown
	// id returns an error wrapping core.ErrNotFound.
	Destroy(ctx context.Context, id string) error

	// List returns sandboxes whose labels include all of labels, including
	// ones made by other processes where the backend can see them.
	List(ctx context.Context, labels map[string]string) ([]core.SandboxInfo, error)

	// ReapOrphans destroys sandboxes whose owner (process or run) is gone,
	// across processes, and returns what it removed. The host calls it when
	// a backend starts and for `rlhost sandbox rm --orphans`.
	ReapOrphans(ctx context.Context) ([]core.SandboxInfo, error)

	// Shutdown destroys every sandbox this process created and releases
	// resources. The host calls it before killing the plugin.
	Shutdown(ctx context.Context) error
}
