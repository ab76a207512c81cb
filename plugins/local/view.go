package local

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/plugins/local/sandboxinit"
)

// The default root view ("runtime") shows untrusted code what programs need
// to run and nothing else of the host: no home directories, no /srv, /opt,
// /var or /mnt, no other project's checkout, no .env files. Everything else
// must be named in a mount block.

// runtimeDirs are bound whole (or recreated as the links they are on
// merged-/usr systems).
var runtimeDirs = []string{"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// etcAllowed are the entries of /etc a sandbox sees (globs): name
// resolution, the dynamic linker, locales and time zone, TLS roots, shell
// start-up files, Python's and Perl's configuration, terminfo, MIME and
// magic data. Never shadow files, ssh host keys, sudoers, private TLS keys
// or package manager credentials: a name not listed here is not shown,
// whatever its mode. passwd, group, hostname and hosts are generated.
var etcAllowed = []string{
	"alternatives", "bash.bashrc", "ca-certificates", "ca-certificates.conf", "debian_version",
	"fonts", "gai.conf", "host.conf", "inputrc", "ld.so.cache", "ld.so.conf", "ld.so.conf.d",
	"locale.alias", "locale.conf", "locale.gen", "localtime", "lsb-release", "magic", "magic.mime",
	"mime.types", "networks", "nsswitch.conf", "os-release", "perl", "pki/ca-trust/extracted",
	"pki/tls/certs", "profile", "profile.d", "protocols", "python3", "python3.*", "resolv.conf",
	"rpc", "services", "shells", "ssl/certs", "ssl/openssl.cnf", "terminfo", "timezone",
}

// etcGenerated are written fresh into every sandbox's /etc: the host's
// would name the host's users and machine.
var etcGenerated = []sandboxinit.File{
	{Dst: "/etc/passwd", Data: []byte("root:x:0:0:root:/workspace:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")},
	{Dst: "/etc/group", Data: []byte("root:x:0:\nnogroup:x:65534:\n")},
	{Dst: "/etc/hostname", Data: []byte("sandbox\n")},
	{Dst: "/etc/hosts", Data: []byte("127.0.0.1\tlocalhost\n127.0.1.1\tsandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n")},
}

// runtimeView lists the binds, links and files of the runtime view of the
// host root at host (normally "/"), read from the host once per Configure.
func runtimeView(host string) (binds []sandboxinit.Bind, links []sandboxinit.Link, files []sandboxinit.File) {
	for _, name := range runtimeDirs {
		p := filepath.Join(host, name)
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if t, err := os.Readlink(p); err == nil {
				links = append(links, sandboxinit.Link{Dst: "/" + name, Target: t})
			}
		case fi.IsDir():
			binds = append(binds, sandboxinit.Bind{Src: p, Dst: "/" + name})
		}
	}
	for _, pat := range etcAllowed {
		matches, _ := filepath.Glob(filepath.Join(host, "etc", pat))
		for _, m := range matches {
			dst := "/" + strings.TrimPrefix(strings.TrimPrefix(m, filepath.Clean(host)), "/")
			fi, err := os.Lstat(m)
			if err != nil {
				continue
			}
			if fi.Mode()&os.ModeSymlink != 0 {
				// A link into the runtime stays a link (readlink of
				// /etc/localtime names the zone); any other is shown as
				// what it points to.
				t, err := os.Readlink(m)
				if err != nil {
					continue
				}
				abs := t
				if !filepath.IsAbs(abs) {
					abs = filepath.Join(filepath.Dir(dst), t)
				}
				if inRuntime(abs) {
					links = append(links, sandboxinit.Link{Dst: dst, Target: t})
					continue
				}
				if fi, err = os.Stat(m); err != nil {
					continue
				}
			}
			// Small files are copied (no mount each); directories bound.
			// Either is read by the sandbox's own uid, so a file it may
			// not read on the host is left out.
			binds = append(binds, sandboxinit.Bind{Src: m, Dst: dst, Copy: fi.Mode().IsRegular(), Optional: true})
		}
	}
	files = append(files, etcGenerated...)
	// Programs that want a second temporary directory get the sandbox's
	// own /tmp; df and friends read the mount table.
	links = append(links, sandboxinit.Link{Dst: "/var/tmp", Target: "/tmp"},
		sandboxinit.Link{Dst: "/etc/mtab", Target: "/proc/self/mounts"})
	return binds, links, files
}

func inRuntime(p string) bool {
	p = filepath.Clean(p)
	for _, d := range runtimeDirs {
		if p == "/"+d || strings.HasPrefix(p, "/"+d+"/") {
			return true
		}
	}
	return false
}

// reservedTargets are sandbox paths a mount may not cover: the init mounts
// its own file systems there after the binds.
var reservedTargets = []string{"proc", "dev", "tmp", "run", "sys", "workspace"}

// resolveMount checks the i-th mount block: the source must exist (and,
// when rlhost runs as root, be reachable by the sandbox's unprivileged
// uid) and must neither hold nor lie in the state dir (other sandboxes'
// workspaces and records), the target must be absolute and outside the
// init's own mounts.
func resolveMount(cfg schema.Config, i int, m Mount, isolation, stateDir string) (sandboxinit.Bind, schema.Diagnostics) {
	at := func(attr string) []string { return []string{"mount", strconv.Itoa(i), attr} }
	var diags schema.Diagnostics
	if isolation != "namespaces" {
		return sandboxinit.Bind{}, schema.Diagnostics{schema.Errorf(at("source"), "mount needs isolation = \"namespaces\"",
			"with isolation = \"none\" commands see the host's files directly")}
	}
	src := cfg.Path(m.Source)
	if m.Source == "" {
		return sandboxinit.Bind{}, schema.Diagnostics{schema.Errorf(at("source"), "mount source is empty", "name a host file or directory")}
	}
	src, err := filepath.Abs(src)
	if err != nil {
		return sandboxinit.Bind{}, schema.Diagnostics{schema.Errorf(at("source"), "invalid mount source", "%q: %v", m.Source, err)}
	}
	fi, err := os.Stat(src)
	if err != nil {
		return sandboxinit.Bind{}, schema.Diagnostics{schema.Errorf(at("source"), "mount source does not exist", "%q (resolved to %s): %v", m.Source, src, err)}
	}
	if real, err := filepath.EvalSymlinks(src); err == nil {
		state := stateDir
		if r, err := filepath.EvalSymlinks(stateDir); err == nil {
			state = r
		} else if a, err := filepath.Abs(stateDir); err == nil {
			state = a
		}
		if within(state, real) || within(real, state) {
			diags = append(diags, schema.Errorf(at("source"), "mount source overlaps the state dir",
				"%s and state_dir %s: the state dir holds every sandbox's workspace and records", src, state))
		}
	}
	if os.Geteuid() == 0 {
		// The init reads the source as the sandbox's unprivileged host uid.
		if err := searchableByOthers(filepath.Dir(src)); err != nil {
			diags = append(diags, schema.Errorf(at("source"), "mount source is not reachable by sandbox uids", "%v", err))
		} else if need := readableBits(fi); fi.Mode().Perm()&need != need {
			diags = append(diags, schema.Errorf(at("source"), "mount source is not readable by sandbox uids",
				"%s has mode %v; sandboxes run as an unprivileged host uid and need o+r%s", src, fi.Mode().Perm(), map[bool]string{true: "x"}[fi.IsDir()]))
		}
	}
	dst := m.Target
	if dst == "" {
		dst = src
	}
	switch {
	case !filepath.IsAbs(dst):
		diags = append(diags, schema.Errorf(at("target"), "mount target must be absolute", "%q", dst))
	case filepath.Clean(dst) == "/":
		diags = append(diags, schema.Errorf(at("target"), "mount target cannot be /", "use rootfs for a whole root"))
	default:
		dst = filepath.Clean(dst)
		top := strings.SplitN(strings.TrimPrefix(dst, "/"), "/", 2)[0]
		for _, r := range reservedTargets {
			if top == r {
				diags = append(diags, schema.Errorf(at("target"), "mount target is inside a file system the sandbox makes itself",
					"%s: /%s is the sandbox's own; pick a target elsewhere (e.g. /data/...)", dst, r))
			}
		}
	}
	return sandboxinit.Bind{Src: src, Dst: dst, RW: m.Writable}, diags
}

// within reports whether p is dir or below it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

func readableBits(fi os.FileInfo) os.FileMode {
	if fi.IsDir() {
		return 0o005
	}
	return 0o004
}

// rootFor fills the root part of a sandbox's setup: a rootfs shown whole,
// the whole host root (root_view = "host"), or the runtime view; then the
// config's mounts.
func (s *settings) rootFor(setup *sandboxinit.Setup, rootfs string) {
	switch {
	case rootfs != "":
		setup.Rootfs = rootfs
	case s.RootView == "host":
		setup.Rootfs = "/"
	default:
		setup.Binds, setup.Links, setup.Files = s.view.binds, s.view.links, s.view.files
	}
	if len(s.mounts) > 0 {
		setup.Binds = append(setup.Binds[:len(setup.Binds):len(setup.Binds)], s.mounts...)
	}
}

// searchableByOthers checks that every directory from / to dir has o+x:
// a sandbox init runs as an unprivileged host uid and binds its workspace
// by path.
func searchableByOthers(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for p := abs; ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		if st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s is not searchable by other users (mode %v); chmod o+x it or pick another state_dir", p, st.Mode().Perm())
		}
		if p == "/" {
			return nil
		}
	}
}
