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
//	/            read-only tmpfs holding only mount points
//	/<entry>     each top-level entry of the rootfs, recursively bound
//	             read-only, nosuid, nodev (proc, sys, dev, tmp, run skipped)
//	/proc        a new proc for the sandbox's PID namespace
//	/dev         null zero full random urandom tty, shm; read-only
//	/tmp, /run   size-capped tmpfs
//	/workspace   size-capped tmpfs, or a host directory in the state dir
//
// Hidden host paths (the state dir) are covered with empty read-only tmpfs.
func buildRoot(s Setup) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	// Open the host workspace before the staging tmpfs may cover its path;
	// the fd belongs to this namespace, so it can be bind-mounted later.
	wsfd := -1
	if s.WorkspaceBytes == 0 {
		fd, err := unix.Open(s.WorkspaceDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open workspace %s: %w", s.WorkspaceDir, err)
		}
		wsfd = fd
		defer unix.Close(wsfd)
	}
	// Any existing directory will do as the staging point: it is covered
	// only in this mount namespace.
	stage := "/tmp"
	if err := unix.Mount("rlhost-root", stage, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m"); err != nil {
		return fmt.Errorf("mount staging tmpfs: %w", err)
	}
	nr := stage
	var binds []string
	skip := map[string]bool{"proc": true, "sys": true, "dev": true, "tmp": true, "run": true, "workspace": true}
	ents, err := os.ReadDir(s.Rootfs)
	if err != nil {
		return fmt.Errorf("read rootfs %s: %w", s.Rootfs, err)
	}
	for _, e := range ents {
		name := e.Name()
		if skip[name] {
			continue
		}
		src, dst := filepath.Join(s.Rootfs, name), filepath.Join(nr, name)
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
		binds = append(binds, dst)
	}
	if err := readOnlyBinds(nr, binds); err != nil {
		return err
	}
	for _, h := range s.Hide {
		rel := strings.TrimPrefix(filepath.Clean(h), filepath.Clean(s.Rootfs))
		p := filepath.Join(nr, rel)
		if st, err := os.Stat(p); err != nil || !st.IsDir() {
			continue // not visible in this root, nothing to hide
		}
		if err := unix.Mount("rlhost-hidden", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=0"); err != nil {
			return fmt.Errorf("hide %s: %w", h, err)
		}
	}

	mk := func(dir string) error {
		if err := os.Mkdir(filepath.Join(nr, dir), 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("root %s: %w", dir, err)
		}
		return nil
	}
	for _, d := range []string{"proc", "dev", "tmp", "run", "workspace", "sys"} {
		if err := mk(d); err != nil {
			return err
		}
	}
	if err := unix.Mount("proc", nr+"/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc (a proc for the sandbox's PID namespace; fails where the host's /proc has masked parts): %w", err)
	}
	if err := buildDev(nr+"/dev", s.TmpBytes); err != nil {
		return err
	}
	tmpfs := func(dir string, size int64, mode string) error {
		opts := fmt.Sprintf("mode=%s,size=%d", mode, size)
		if err := unix.Mount("tmpfs", nr+dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
			return fmt.Errorf("mount %s: %w", dir, err)
		}
		return nil
	}
	if err := tmpfs("/tmp", s.TmpBytes, "1777"); err != nil {
		return err
	}
	if err := tmpfs("/run", 1<<20, "0755"); err != nil {
		return err
	}
	if s.WorkspaceBytes > 0 {
		if err := tmpfs("/workspace", s.WorkspaceBytes, "0755"); err != nil {
			return err
		}
	} else {
		if err := unix.Mount(fmt.Sprintf("/proc/self/fd/%d", wsfd), nr+"/workspace", "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind workspace %s: %w", s.WorkspaceDir, err)
		}
		if err := unix.Mount("", nr+"/workspace", "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
			return fmt.Errorf("remount workspace: %w", err)
		}
	}

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
	if err := unix.Mount("", "/", "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("make / read-only: %w", err)
	}
	return nil
}

// readOnlyBinds makes each bound tree read-only, nosuid and nodev with one
// mount_setattr(AT_RECURSIVE) per tree (Linux 5.12+), falling back to
// remounting every mount below dir one by one on older kernels.
func readOnlyBinds(dir string, binds []string) error {
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	for i, b := range binds {
		err := unix.MountSetattr(unix.AT_FDCWD, b, unix.AT_RECURSIVE, &attr)
		if err == unix.ENOSYS && i == 0 {
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
// the host's (a user namespace cannot mknod), fd links, and a capped shm.
func buildDev(dev string, shmBytes int64) error {
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
	if err := unix.Mount("shm", dev+"/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("mode=1777,size=%d", shmBytes)); err != nil {
		return fmt.Errorf("mount /dev/shm: %w", err)
	}
	if err := unix.Mount("", dev, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("make /dev read-only: %w", err)
	}
	return nil
}
