package pluginmgr

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/rlhost/rlhost/core/suggest"
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
	if len(s.Args) > 0 {
		return fmt.Sprintf("%s plugin %q (%s %s)", s.Kind, s.Name, s.Path, strings.Join(s.Args, " "))
	}
	return fmt.Sprintf("%s plugin %q (%s)", s.Kind, s.Name, s.Path)
}

// DefaultPython is the interpreter a Python plugin script runs under when
// its block names none.
const DefaultPython = "python3"

// interpreterSep joins a script and its interpreter in one reference. NUL
// cannot occur in a path, so no file name is ever mistaken for the pair.
const interpreterSep = "\x00python="

// WithPython makes the reference for a plugin script run by the Python
// interpreter python (a command name looked up in PATH, or a path relative
// to the job file). Resolve takes it apart again.
func WithPython(script, python string) string {
	if python == "" {
		return script
	}
	return script + interpreterSep + python
}

// isPythonScript says whether a plugin reference names a Python source file,
// which is run by an interpreter rather than executed itself.
func isPythonScript(ref string) bool { return strings.HasSuffix(ref, ".py") }

// BuiltinArg is the hidden subcommand the rlhost binary serves plugins under.
const BuiltinArg = "__plugin"

// Resolve turns a reference from the config into a Source. A reference with
// a path separator is a file, relative to baseDir; a file ending in .py is a
// Python script run by its interpreter (see WithPython). Otherwise a
// built-in name wins, then an executable named rlhost-<kind>-<name> in the
// plugin dirs.
func (m *Manager) Resolve(kind, ref, baseDir string) (Source, error) {
	ref, python, _ := strings.Cut(ref, interpreterSep)
	if ref == "" {
		return Source{}, fmt.Errorf("no %s plugin named", kind)
	}
	if python != "" && !isPythonScript(ref) {
		return Source{}, fmt.Errorf("%s plugin %q: an interpreter is set, but the plugin is not a .py file", kind, ref)
	}
	if isPythonScript(ref) {
		return resolveScript(kind, ref, python, baseDir)
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
	if s := suggest.Closest(ref, known); s != "" {
		return Source{}, fmt.Errorf("unknown %s plugin %q: did you mean %q? (built-in %s plugins are %s)", kind, ref, s, kind, strings.Join(known, ", "))
	}
	return Source{}, fmt.Errorf("unknown %s plugin %q: built-in %s plugins are %s; an external plugin is a path (./my-plugin) or an executable rlhost-%s-%s in %s",
		kind, ref, kind, strings.Join(known, ", "), kind, ref, strings.Join(m.dirs, ":"))
}

// resolveScript finds a Python plugin script and its interpreter. The
// script need not be executable: it is the interpreter's argument.
func resolveScript(kind, ref, python, baseDir string) (Source, error) {
	script := ref
	if !filepath.IsAbs(script) {
		script = filepath.Join(baseDir, script)
	}
	st, err := os.Stat(script)
	if err != nil {
		return Source{}, fmt.Errorf("%s plugin %q: no plugin script at %s: %w", kind, ref, script, err)
	}
	if st.IsDir() {
		return Source{}, fmt.Errorf("%s plugin %q: %s is a directory, not a Python script", kind, ref, script)
	}
	if python == "" {
		python = DefaultPython
	}
	interp := python
	if strings.ContainsRune(python, os.PathSeparator) {
		if !filepath.IsAbs(interp) {
			interp = filepath.Join(baseDir, interp)
		}
		if err := checkExecutable(interp); err != nil {
			return Source{}, fmt.Errorf("%s plugin %q: python interpreter: %w", kind, ref, err)
		}
	} else if interp, err = exec.LookPath(python); err != nil {
		return Source{}, fmt.Errorf("%s plugin %q: python interpreter %q not found in PATH (set python = \"/path/to/python3\" in the block): %w", kind, ref, python, err)
	}
	return Source{Kind: kind, Name: ref, Path: interp, Args: []string{script}}, nil
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
