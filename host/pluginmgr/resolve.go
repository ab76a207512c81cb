package pluginmgr

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Source says how to launch one plugin.
type Source struct {
	Kind    string // pluginbase.KindEnv or KindSandbox
	Name    string // built-in name, or the name the user wrote
	Path    string // executable; the rlhost binary itself for built-ins
	Args    []string
	Builtin bool
}

func (s Source) String() string {
	if s.Builtin {
		return fmt.Sprintf("built-in %s plugin %q", s.Kind, s.Name)
	}
	return fmt.Sprintf("%s plugin %q (%s)", s.Kind, s.Name, s.Path)
}

// BuiltinArg is the hidden subcommand the rlhost binary serves plugins under.
const BuiltinArg = "__plugin"

// Resolve turns a reference from the config into a Source. A reference with
// a path separator is a file, relative to baseDir; otherwise a built-in name
// wins, then an executable named rlhost-<kind>-<name> in the plugin dirs.
func (m *Manager) Resolve(kind, ref, baseDir string) (Source, error) {
	if ref == "" {
		return Source{}, fmt.Errorf("no %s plugin named", kind)
	}
	if strings.ContainsRune(ref, os.PathSeparator) || strings.HasPrefix(ref, ".") {
		p := ref
		if !filepath.IsAbs(p) {
			p = filepath.Join(baseDir, p)
		}
		if err := checkExecutable(p); err != nil {
			return Source{}, fmt.Errorf("%s plugin %q: %w", kind, ref, err)
		}
		return Source{Kind: kind, Name: ref, Path: p}, nil
	}
	for _, b := range m.builtins[kind] {
		if b == ref {
			return Source{Kind: kind, Name: ref, Path: m.self, Args: []string{BuiltinArg, kind, ref}, Builtin: true}, nil
		}
	}
	for _, dir := range m.dirs {
		p := filepath.Join(dir, "rlhost-"+kind+"-"+ref)
		if checkExecutable(p) == nil {
			return Source{Kind: kind, Name: ref, Path: p}, nil
		}
	}
	known := append([]string(nil), m.builtins[kind]...)
	sort.Strings(known)
	return Source{}, fmt.Errorf("unknown %s plugin %q: built-in %s plugins are %s; an external plugin is a path (./my-plugin) or an executable rlhost-%s-%s in %s",
		kind, ref, kind, strings.Join(known, ", "), kind, ref, strings.Join(m.dirs, ":"))
}

// Discover lists external plugins of kind found in the plugin dirs.
func (m *Manager) Discover(kind string) []Source {
	var out []Source
	prefix := "rlhost-" + kind + "-"
	for _, dir := range m.dirs {
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if !strings.HasPrefix(e.Name(), prefix) {
				continue
			}
			p := filepath.Join(dir, e.Name())
			if checkExecutable(p) == nil {
				out = append(out, Source{Kind: kind, Name: strings.TrimPrefix(e.Name(), prefix), Path: p})
			}
		}
	}
	return out
}

func checkExecutable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("no plugin executable at %s: %w", p, err)
	}
	if st.IsDir() {
		return fmt.Errorf("%s is a directory, not a plugin executable", p)
	}
	if st.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not executable (chmod +x it)", p)
	}
	return nil
}

// DefaultDirs are where external plugins are looked for: $RLHOST_PLUGIN_PATH
// (colon-separated), then ~/.rlhost/plugins.
func DefaultDirs() []string {
	var dirs []string
	if v := os.Getenv("RLHOST_PLUGIN_PATH"); v != "" {
		dirs = append(dirs, filepath.SplitList(v)...)
	}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, ".rlhost", "plugins"))
	}
	return dirs
}
