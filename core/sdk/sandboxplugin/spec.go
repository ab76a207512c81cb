package sandboxplugin

import (
	"fmt"
	"maps"
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

// Common is the spec's settings every backend applies the same way,
// checked and normalised.
type Common struct {
	Workdir string            // cleaned; core.DefaultWorkdir when the spec names none
	Env     map[string]string // a copy; every name a shell identifier
	Labels  map[string]string // a copy
}

// CheckCommon checks and copies the common settings: the workdir must be
// absolute and not /, and environment variable names shell identifiers,
// since remote backends pass them through a shell.
func CheckCommon(spec core.SandboxSpec) (Common, schema.Diagnostics) {
	var ds schema.Diagnostics
	c := Common{Workdir: spec.Workdir, Env: make(map[string]string, len(spec.Env)), Labels: maps.Clone(spec.Labels)}
	if c.Workdir == "" {
		c.Workdir = core.DefaultWorkdir
	}
	if !path.IsAbs(c.Workdir) || path.Clean(c.Workdir) == "/" {
		ds = append(ds, schema.Errorf([]string{"workdir"}, "invalid workdir", "%q must be an absolute directory other than /", c.Workdir))
	}
	c.Workdir = path.Clean(c.Workdir)
	for k, v := range spec.Env {
		if !envName.MatchString(k) {
			ds = append(ds, schema.Errorf([]string{"env", k}, "invalid environment variable name", "%q is not a shell identifier", k))
		}
		c.Env[k] = v
	}
	if c.Labels == nil {
		c.Labels = map[string]string{}
	}
	return c, ds
}
