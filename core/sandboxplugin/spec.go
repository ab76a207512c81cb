package sandboxplugin

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
)

// Checks of the common sandbox settings that every backend makes the same
// way, so each states only what differs: which limits it enforces.

// CheckLimits reports every negative limit, and every limit set that is
// not in enforced, at the limit's path (["limits", "tmp"]). by names who
// refuses ("the daytona backend"); why explains the refusal, a %s in it
// replaced by the limit's name.
func CheckLimits(l core.Limits, by string, enforced []string, why string) schema.Diagnostics {
	var ds schema.Diagnostics
	for _, n := range l.Named() {
		p := []string{"limits", n.Name}
		switch {
		case n.Value < 0:
			ds = append(ds, schema.Errorf(p, "limit must be >= 0", "limits.%s = %g", n.Name, n.Value))
		case n.Value != 0 && !slices.Contains(enforced, n.Name):
			detail := why
			if strings.Contains(why, "%s") {
				detail = fmt.Sprintf(why, n.Name)
			}
			ds = append(ds, schema.Errorf(p, fmt.Sprintf("limits.%s is not supported by %s", n.Name, by), "%s", detail))
		}
	}
	return ds
}

// EnvNamePattern is what an environment variable name must match: a shell
// identifier, since remote backends pass the environment through a shell.
const EnvNamePattern = `^[A-Za-z_][A-Za-z0-9_]*$`

var envName = regexp.MustCompile(EnvNamePattern)

// CheckWorkdir returns the spec's working directory, cleaned, or
// core.DefaultWorkdir when it names none; it must be absolute and not /.
func CheckWorkdir(spec core.SandboxSpec) (string, schema.Diagnostics) {
	w := spec.Workdir
	if w == "" {
		w = core.DefaultWorkdir
	}
	if !path.IsAbs(w) || path.Clean(w) == "/" {
		return path.Clean(w), schema.Diagnostics{schema.Errorf([]string{"workdir"}, "invalid workdir", "%q must be an absolute directory other than /", w)}
	}
	return path.Clean(w), nil
}

// CheckEnv returns a copy of the spec's environment; every name must be a
// shell identifier, since remote backends pass them through a shell.
func CheckEnv(spec core.SandboxSpec) (map[string]string, schema.Diagnostics) {
	var ds schema.Diagnostics
	env := make(map[string]string, len(spec.Env))
	for k, v := range spec.Env {
		if !envName.MatchString(k) {
			ds = append(ds, schema.Errorf([]string{"env", k}, "invalid environment variable name", "%q is not a shell identifier", k))
		}
		env[k] = v
	}
	return env, ds
}
