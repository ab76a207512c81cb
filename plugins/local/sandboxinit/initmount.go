package sandboxinit

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// buildRoot makes the sandbox's root view in the init's fresh mount
// namespace and pivots into it:
//
//	/            read-only tmpfs holding only mount points, links and
//	             small generated or copied files (/etc)
//	Rootfs       if set: each of its top-level entries, recursively bound
//	             (proc, sys, dev, tmp, run, workspace skipped)
//	Binds        host paths bound one by one (the allow-listed runtime
//	             view and the config's mounts), read-only unless RW; all
//	             nosuid, nodev
//	/proc        a new proc for the sandbox's PID namespace
//	/dev         null zero full random urandom tty, shm; read-only
//	/tmp, /run   size-capped tmpfs
//	/workspace   size-capped tmpfs, or a host directory in the state dir
//
// Hidden host paths (the state dir) are covered with empty read-only tmpfs.
// Host paths are read as the sandbox's uid, so only what that uid may read
// on the host can appear.
//
// The part shared by every sandbox of a backend (all but /proc, /dev/shm,
// /tmp, /run and /workspace) is what fillRoot builds; a launcher builds it
// once as a template (see launcherMain), and an init started from it only
// runs finishRoot (see templateRoot).
func buildRoot(s Setup, tr *Tracer) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	// Open the host workspace before the staging tmpfs may cover its path;
	// the fd belongs to this namespace, so it can be bind-mounted later.
	wsfd, err := openWorkspace(s)
	if err != nil {
		return err
	}
	defer unix.Close(wsfd)
	// Open the rootfs and every bind source first too: they may lie below
	// the staging point.
	src, err := openRootSources(s)
	if err != nil {
		return err
	}
	defer src.close()
	tr.Mark("open")
	// Any existing directory will do as the staging point: it is covered
	// only in this mount namespace.
	stage := "/tmp"
	if err := unix.Mount("rlhost-root", stage, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=8m"); err != nil {
		return fmt.Errorf("mount staging tmpfs: %w", err)
	}
	if err := fillRoot(s, src, stage, tr); err != nil {
		return err
	}
	if err := finishRoot(s, stage, wsfd, tr); err != nil {
		return err
	}
	if err := unix.Mount("", "/", "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("make / read-only: %w", err)
	}
	return nil
}

// templateRoot finishes a root view from the template an init started by
// a launcher finds as its working directory: a copy, made by the kernel
// when the init's mount namespace was cloned from the launcher's, of the
// read-only tree fillRoot built there once. Copied into the sandbox's
// less privileged user namespace, those mounts are locked: the sandbox can
// neither unmount them nor make them writable.
func templateRoot(s Setup, tr *Tracer) error {
	wsfd, err := openWorkspace(s)
	if err != nil {
		return err
	}
	defer unix.Close(wsfd)
	var st unix.Statfs_t
	if err := unix.Statfs(".", &st); err != nil || st.Type != unix.TMPFS_MAGIC || st.Flags&unix.ST_RDONLY == 0 {
		return fmt.Errorf("template root %s: not the launcher's read-only tmpfs (statfs: %v)", s.Template, err)
	}
	// The copy's top mount is locked to its parent, and pivot_root refuses
	// a locked new root; a recursive bind of it is not locked at the top
	// (its sub-mounts stay locked, and it stays read-only). Any existing
	// directory will do as the place for it, as in buildRoot.
	const stage = "/tmp"
	if err := unix.Mount(".", stage, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind template root: %w", err)
	}
	tr.Mark("bind")
	return finishRoot(s, stage, wsfd, tr)
}

// openWorkspace opens a host workspace directory (O_PATH), or returns -1
// for a tmpfs workspace.
func openWorkspace(s Setup) (int, error) {
	if s.WorkspaceBytes > 0 {
		return -1, nil
	}
	fd, err := unix.Open(s.WorkspaceDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open workspace %s: %w", s.WorkspaceDir, err)
	}
	return fd, nil
}

// rootSources are the rootfs and bind sources of a root view, opened
// before anything may cover their paths.
type rootSources struct {
	rootfs   string // as /proc/self/fd/N, or ""
	rootfsFD int
	srcs     []source
}

func openRootSources(s Setup) (*rootSources, error) {
	rs := &rootSources{rootfsFD: -1, srcs: make([]source, len(s.Binds))}
	if s.Rootfs != "" {
		fd, err := unix.Open(s.Rootfs, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("open rootfs %s: %w", s.Rootfs, err)
		}
		rs.rootfsFD, rs.rootfs = fd, fmt.Sprintf("/proc/self/fd/%d", fd)
	}
	for i, b := range s.Binds {
		rs.srcs[i] = openSource(b)
	}
	return rs, nil
}

func (rs *rootSources) close() {
	if rs.rootfsFD >= 0 {
		unix.Close(rs.rootfsFD)
	}
	for _, src := range rs.srcs {
		if src.fd >= 0 {
			unix.Close(src.fd)
		}
	}
}

// fillRoot builds the shared part of a root view on the tmpfs mounted at
// nr: the rootfs or the binds, links and files, the hidden paths, the
// mount points of the per-sandbox file systems, and /dev (but its shm).
func fillRoot(s Setup, src *rootSources, nr string, tr *Tracer) error {
	var st unix.Stat_t
	if err := unix.Stat(nr, &st); err != nil {
		return fmt.Errorf("stat staging tmpfs: %w", err)
	}
	r := &rootBuilder{nr: nr, dev: st.Dev}
	if src.rootfs != "" {
		if err := r.wholeRoot(src.rootfs); err != nil {
			return err
		}
	}
	for _, l := range s.Links {
		if err := r.mkParents(l.Dst); err != nil {
			return err
		}
		if err := os.Symlink(l.Target, r.nr+l.Dst); err != nil {
			return fmt.Errorf("root %s: %w", l.Dst, err)
		}
	}
	for _, f := range s.Files {
		if err := r.mkParents(f.Dst); err != nil {
			return err
		}
		if err := os.WriteFile(r.nr+f.Dst, f.Data, 0o644); err != nil {
			return fmt.Errorf("root %s: %w", f.Dst, err)
		}
	}
	tr.Mark("files")
	for i, b := range s.Binds {
		if err := r.bind(b, src.srcs[i]); err != nil {
			return err
		}
	}
	tr.Mark("binds")
	if err := readOnlyBinds(r.nr, r.ro, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV); err != nil {
		return err
	}
	if err := readOnlyBinds(r.nr, r.rw, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV); err != nil {
		return err
	}
	for _, h := range s.Hide {
		rel := strings.TrimPrefix(filepath.Clean(h), filepath.Clean(s.Rootfs))
		if s.Rootfs == "" {
			rel = filepath.Clean(h)
		}
		p := filepath.Join(nr, rel)
		if st, err := os.Stat(p); err != nil || !st.IsDir() {
			continue // not visible in this root, nothing to hide
		}
		if err := unix.Mount("rlhost-hidden", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=0"); err != nil {
			return fmt.Errorf("hide %s: %w", h, err)
		}
	}
	for _, d := range []string{"proc", "dev", "tmp", "run", "workspace", "sys"} {
		if err := os.Mkdir(filepath.Join(nr, d), 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("root %s: %w", d, err)
		}
	}
	if err := buildDev(nr + "/dev"); err != nil {
		return err
	}
	tr.Mark("dev")
	return nil
}

// scratchMount is one of a sandbox's writable tmpfs mounts, made at
// set-up and made again, empty, by a reset.
type scratchMount struct {
	dir  string
	size int64
	mode string
}

// scratchMounts lists them: /dev/shm, /tmp, /run, and /workspace unless
// the workspace is a host directory.
func scratchMounts(s Setup) []scratchMount {
	m := []scratchMount{{"/dev/shm", s.TmpBytes, "1777"}, {"/tmp", s.TmpBytes, "1777"}, {"/run", 1 << 20, "0755"}}
	if s.WorkspaceBytes > 0 {
		m = append(m, scratchMount{"/workspace", s.WorkspaceBytes, "0755"})
	}
	return m
}

// mount mounts a new tmpfs at m.dir under root.
func (m scratchMount) mount(root string) error {
	opts := fmt.Sprintf("mode=%s,size=%d", m.mode, m.size)
	if err := unix.Mount("tmpfs", root+m.dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount %s: %w", m.dir, err)
	}
	return nil
}

// finishRoot mounts the per-sandbox file systems on the root view at nr
// (/proc, /dev/shm, /tmp, /run, /workspace) and pivots into it.
func finishRoot(s Setup, nr string, wsfd int, tr *Tracer) error {
	if err := unix.Mount("proc", nr+"/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc (a proc for the sandbox's PID namespace; fails where the host's /proc has masked parts): %w", err)
	}
	tr.Mark("proc")
	for _, m := range scratchMounts(s) {
		if err := m.mount(nr); err != nil {
			return err
		}
	}
	if s.WorkspaceBytes <= 0 {
		if err := unix.Mount(fmt.Sprintf("/proc/self/fd/%d", wsfd), nr+"/workspace", "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind workspace %s: %w", s.WorkspaceDir, err)
		}
		if err := unix.Mount("", nr+"/workspace", "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
			return fmt.Errorf("remount workspace: %w", err)
		}
	}
	tr.Mark("tmpfs")
	if err := unix.Chdir(nr); err != nil {
		return fmt.Errorf("chdir new root: %w", err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("chdir /: %w", err)
	}
	tr.Mark("pivot")
	return nil
}

// rootBuilder fills the staging tmpfs nr (device dev).
type rootBuilder struct {
	nr     string
	dev    uint64
	ro, rw []string // bind mount points, to be made read-only / nosuid
}

// wholeRoot binds every top-level entry of rootfs (the whole-root view).
func (r *rootBuilder) wholeRoot(rootfs string) error {
	skip := map[string]bool{"proc": true, "sys": true, "dev": true, "tmp": true, "run": true, "workspace": true}
	ents, err := os.ReadDir(rootfs)
	if err != nil {
		return fmt.Errorf("read rootfs %s: %w", rootfs, err)
	}
	for _, e := range ents {
		name := e.Name()
		if skip[name] {
			continue
		}
		src, dst := filepath.Join(rootfs, name), filepath.Join(r.nr, name)
		switch t := e.Type(); {
		case t&os.ModeSymlink != 0:
			target, err := os.Readlink(src)
			if err != nil {
				return fmt.Errorf("rootfs %s: %w", src, err)
			}
			if err := os.Symlink(target, dst); err != nil {
				return fmt.Errorf("root %s: %w", dst, err)
			}
			continue
		case t.IsDir():
			if err := os.Mkdir(dst, 0o755); err != nil {
				return fmt.Errorf("root %s: %w", dst, err)
			}
		case t.IsRegular():
			if err := os.WriteFile(dst, nil, 0o644); err != nil {
				return fmt.Errorf("root %s: %w", dst, err)
			}
		default:
			continue
		}
		if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s: %w", src, err)
		}
		r.ro = append(r.ro, dst)
	}
	return nil
}

// mkParents creates the missing parent directories of dst (a path in the
// sandbox) on the staging tmpfs. It never creates anything inside a bound
// host directory, where it would land on the host.
func (r *rootBuilder) mkParents(dst string) error {
	dir := filepath.Dir(dst)
	if dir == "/" {
		return nil
	}
	if err := r.mkParents(dir); err != nil {
		return err
	}
	return r.create(dir, true)
}

// create makes the mount point p (a directory or an empty file) unless it
// exists, and only on the staging tmpfs.
func (r *rootBuilder) create(p string, dir bool) error {
	var st unix.Stat_t
	if err := unix.Stat(r.nr+p, &st); err == nil {
		if (st.Mode&unix.S_IFMT == unix.S_IFDIR) != dir {
			return fmt.Errorf("root %s: exists and is not a %s", p, map[bool]string{true: "directory", false: "file"}[dir])
		}
		return nil
	}
	var pst unix.Stat_t
	if err := unix.Stat(r.nr+filepath.Dir(p), &pst); err != nil {
		return fmt.Errorf("root %s: %w", filepath.Dir(p), err)
	}
	if pst.Dev != r.dev {
		return fmt.Errorf("root %s: does not exist, and cannot be created inside the bound directory %s", p, filepath.Dir(p))
	}
	if dir {
		if err := os.Mkdir(r.nr+p, 0o755); err != nil {
			return fmt.Errorf("root %s: %w", p, err)
		}
		return nil
	}
	if err := os.WriteFile(r.nr+p, nil, 0o644); err != nil {
		return fmt.Errorf("root %s: %w", p, err)
	}
	return nil
}

// source is a bind source opened before the staging tmpfs went up.
type source struct {
	fd   int // O_PATH, or -1
	dir  bool
	data []byte // a copied file's contents
	err  error
}

func openSource(b Bind) source {
	if b.Copy {
		// Copied sources are plain files (the backend says so); a
		// directory there fails the read and is bound instead.
		data, err := os.ReadFile(b.Src)
		if err == nil {
			return source{fd: -1, data: data}
		}
		if !errors.Is(err, unix.EISDIR) {
			return source{fd: -1, err: err}
		}
	}
	fd, err := unix.Open(b.Src, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return source{fd: -1, err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return source{fd: -1, err: err}
	}
	return source{fd: fd, dir: st.Mode&unix.S_IFMT == unix.S_IFDIR}
}

// bind shows one host path in the root: copied (small files), or bound.
func (r *rootBuilder) bind(b Bind, src source) error {
	fail := func(err error) error {
		if b.Optional {
			return nil
		}
		return fmt.Errorf("mount %s at %s: %w", b.Src, b.Dst, err)
	}
	if src.err != nil {
		return fail(src.err)
	}
	if err := r.mkParents(b.Dst); err != nil {
		return fail(err)
	}
	if src.fd < 0 {
		if err := os.WriteFile(r.nr+b.Dst, src.data, 0o644); err != nil {
			return fail(err)
		}
		return nil
	}
	if err := r.create(b.Dst, src.dir); err != nil {
		return fail(err)
	}
	if err := unix.Mount(fmt.Sprintf("/proc/self/fd/%d", src.fd), r.nr+b.Dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fail(err)
	}
	if b.RW {
		r.rw = append(r.rw, r.nr+b.Dst)
	} else {
		r.ro = append(r.ro, r.nr+b.Dst)
	}
	return nil
}

// readOnlyBinds sets attrs (read-only, nosuid, nodev) on each bound tree
// with one mount_setattr(AT_RECURSIVE) per tree (Linux 5.12+), falling
// back on older kernels to remounting every mount below dir read-only one
// by one (read-write binds then fail: they need 5.12).
func readOnlyBinds(dir string, binds []string, attrs uint64) error {
	attr := unix.MountAttr{Attr_set: attrs}
	for i, b := range binds {
		err := unix.MountSetattr(unix.AT_FDCWD, b, unix.AT_RECURSIVE, &attr)
		if err == unix.ENOSYS && i == 0 && attrs&unix.MOUNT_ATTR_RDONLY != 0 {
			return remountReadOnlyUnder(dir)
		}
		if err != nil {
			return fmt.Errorf("make %s read-only: %w", b, err)
		}
	}
	return nil
}

// remountReadOnlyUnder makes every mount below dir read-only, nosuid and
// nodev, keeping the flags the kernel locks for mounts from another user
// namespace (noexec, atime) so the remount is permitted.
func remountReadOnlyUnder(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("read mountinfo: %w", err)
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 5 {
			continue
		}
		mp := unescapeMount(fs[4])
		if strings.HasPrefix(mp, dir+"/") {
			points = append(points, mp)
		}
	}
	sort.Strings(points) // parents before children
	for _, mp := range points {
		var st unix.Statfs_t
		if err := unix.Statfs(mp, &st); err != nil {
			continue // covered by a later mount
		}
		flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV)
		for _, m := range [][2]int64{{unix.ST_NOEXEC, unix.MS_NOEXEC}, {unix.ST_NOATIME, unix.MS_NOATIME},
			{unix.ST_NODIRATIME, unix.MS_NODIRATIME}, {unix.ST_RELATIME, unix.MS_RELATIME}} {
			if st.Flags&m[0] != 0 {
				flags |= uintptr(m[1])
			}
		}
		if err := unix.Mount("", mp, "", flags, ""); err != nil {
			return fmt.Errorf("remount %s read-only: %w", mp, err)
		}
	}
	return nil
}

// buildDev makes a minimal /dev: a few harmless device nodes bound from
// the host's (a user namespace cannot mknod), fd links, and the mount
// point of a capped shm, which finishRoot mounts per sandbox.
func buildDev(dev string) error {
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return fmt.Errorf("mount /dev: %w", err)
	}
	for _, n := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		p := dev + "/" + n
		if err := os.WriteFile(p, nil, 0o666); err != nil {
			return fmt.Errorf("/dev/%s: %w", n, err)
		}
		if err := unix.Mount("/dev/"+n, p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind /dev/%s: %w", n, err)
		}
		unix.Mount("", p, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NOEXEC, "")
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
		"stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, dev+"/"+name); err != nil {
			return fmt.Errorf("/dev/%s: %w", name, err)
		}
	}
	if err := os.Mkdir(dev+"/shm", 0o1777); err != nil {
		return fmt.Errorf("/dev/shm: %w", err)
	}
	if err := unix.Mount("", dev, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("make /dev read-only: %w", err)
	}
	return nil
}
