package sandboxinit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/rlhost/rlhost/core"
)

// The backend and a sandbox init exchange length-prefixed JSON frames over
// a stream socketpair (the first, the Setup, in a binary encoding: see
// setupcodec.go). Requests carry an ID so several can be in flight.

// MaxFrame caps one frame: at most a file or two output captures.
const MaxFrame = 512 << 20

// MaxListEntries caps a directory listing.
const MaxListEntries = 100000

// ProtocolVersion is bumped on any incompatible change of the frames, so a
// stale helper binary refuses to serve a newer backend.
const ProtocolVersion = 5

// RoleEnv, set to "init", tells a re-executed binary to become a sandbox
// init (see Reexec).
const RoleEnv = "RLHOST_LOCAL_SANDBOX_ROLE"

// Setup is the first frame the backend sends a new init.
type Setup struct {
	Proto int `json:"proto"`
	// Rootfs, when set, is shown whole: each of its top-level entries is
	// bound read-only (a rootfs directory, or "/" for root_view = "host").
	Rootfs string `json:"rootfs,omitempty"`
	// Binds, Links and Files build the root entry by entry, in this order
	// (the allow-listed runtime view, then the config's mounts).
	Binds          []Bind   `json:"binds,omitempty"`
	Links          []Link   `json:"links,omitempty"`
	Files          []File   `json:"files,omitempty"`
	Hide           []string `json:"hide,omitempty"` // host paths to cover with an empty tmpfs
	TmpBytes       int64    `json:"tmp_bytes"`
	WorkspaceBytes int64    `json:"workspace_bytes"` // >0: tmpfs workspace
	WorkspaceDir   string   `json:"workspace_dir"`   // else: this host directory
	Network        bool     `json:"network"`
	Trace          bool     `json:"trace,omitempty"` // log setup stage times to stderr
	Hostname       string   `json:"hostname"`
	FileSize       int64    `json:"file_size"`
	OpenFiles      int      `json:"open_files"`
	// Seccomp is a classic BPF program (an array of struct sock_filter,
	// native byte order) installed on the thread that starts commands, so
	// every command and its descendants run under it. Empty: no filter.
	Seccomp []byte `json:"seccomp,omitempty"`
	// CgroupTaskFDs (cgroup v1) are inherited fds of the commands cgroup's
	// tasks files, one per hierarchy: the thread that starts commands moves
	// itself there, so every command starts inside it.
	CgroupTaskFDs []int `json:"cgroup_task_fds,omitempty"`
	// CgroupProcsFD (cgroup v2, when > 0) is an inherited fd of the commands
	// cgroup's cgroup.procs: each command is moved there while it is
	// stopped at its exec, before its first instruction.
	CgroupProcsFD int `json:"cgroup_procs_fd,omitempty"`
	// Isolation is what every exec result reports ("namespaces", or
	// "namespaces (seccomp off)").
	Isolation string `json:"isolation,omitempty"`
	// Template, when set, names the launcher's template root (for
	// messages): the init was started from a launcher with it as its
	// working directory, and only adds the per-sandbox mounts (see
	// templateRoot); Rootfs, Binds, Links, Files and Hide are then unused.
	Template string `json:"template,omitempty"`
}

// LauncherSetup is the first message the backend sends a launcher: the
// shared part of every sandbox's root view, built once as a template.
type LauncherSetup struct {
	Proto int `json:"proto"`
	// Root carries Rootfs, Binds, Links, Files and Hide; the rest is unused.
	Root Setup `json:"root"`
	// Dir is the (empty) directory the template is mounted on in the
	// launcher's private mount namespace.
	Dir string `json:"dir"`
	// ReadUID and ReadGID are the host ids host paths are read as (the
	// first sandbox uid), so the template shows only what a sandbox's uid
	// may read on the host.
	ReadUID int  `json:"read_uid"`
	ReadGID int  `json:"read_gid"`
	Trace   bool `json:"trace,omitempty"`
}

// LaunchRequest asks a launcher to start one sandbox init. Its fds travel
// with it (SCM_RIGHTS) and become the init's fds 3 (control socket), then
// 5, 6, ... (fd 4 is the helper binary the init is executed through).
type LaunchRequest struct {
	UID      int    `json:"uid"`
	GID      int    `json:"gid"`
	Network  bool   `json:"network"`
	ID       string `json:"id"`
	CgroupFD int    `json:"cgroup_fd"` // >0: index in the fds of a cgroup v2 directory to start the init in

	// Cgroup v1: indices in the fds of the tasks files of the init's
	// cgroups (Join) and of the launcher's own (Home), one per hierarchy.
	// The forking thread moves itself into Join, forks, and moves back:
	// the init is born in its cgroups. Moving a process in afterwards
	// (cgroup.procs) takes the kernel's global threadgroup lock, whose
	// first writer after a quiet spell waits out an RCU grace period
	// (milliseconds); a thread moving only itself skips that lock.
	JoinFDs []int `json:"join_fds,omitempty"`
	HomeFDs []int `json:"home_fds,omitempty"`
}

// LaunchReply answers a LaunchRequest; on success a pidfd of the new init
// travels with it.
type LaunchReply struct {
	PID int    `json:"pid"`
	Err string `json:"err,omitempty"`
}

// Bind mounts a host path (file or directory) at Dst, recursively,
// read-only, nosuid and nodev unless RW. Copy copies a regular file's
// contents instead (small /etc files: no mount to set up or tear down).
type Bind struct {
	Src  string `json:"src"`
	Dst  string `json:"dst"`
	RW   bool   `json:"rw,omitempty"`
	Copy bool   `json:"copy,omitempty"`
	// Optional binds whose source is missing or unreadable are skipped.
	Optional bool `json:"optional,omitempty"`
}

// Link is a symbolic link in the sandbox's root.
type Link struct {
	Dst    string `json:"dst"`
	Target string `json:"target"`
}

// File is a small generated file in the sandbox's root.
type File struct {
	Dst  string `json:"dst"`
	Data []byte `json:"data"`
}

// Request is a frame from the backend to an init, Response one back; both
// travel in the encoding of framecodec.go.
type Request struct {
	ID   uint64
	Op   string // exec, cancel, killpg, read, write, list, ping
	Pgid int
	Exec *ExecSpec
	Path string
	Data []byte
	Mode uint32
	Max  int64
}

type Response struct {
	ID      uint64
	Err     string
	ErrKind string
	Exec    *core.ExecResult // output included: strings carry any bytes in this encoding
	Pgid    int              // process group of an exec, for killpg
	Data    []byte
	Files   []core.FileInfo
}

// ErrKind and KindErr carry core sentinel errors across the socket.
func ErrKind(err error) string {
	switch {
	case errors.Is(err, core.ErrNotFound):
		return "not_found"
	case errors.Is(err, core.ErrInvalidPath):
		return "invalid_path"
	case errors.Is(err, core.ErrTooLarge):
		return "too_large"
	}
	return ""
}

func KindErr(kind, msg string) error {
	switch kind {
	case "not_found":
		return fmt.Errorf("%s: %w", msg, core.ErrNotFound)
	case "invalid_path":
		return fmt.Errorf("%s: %w", msg, core.ErrInvalidPath)
	case "too_large":
		return fmt.Errorf("%s: %w", msg, core.ErrTooLarge)
	}
	return errors.New(msg)
}

// sendFrame fills in the length prefix of buf (a frame whose first four
// bytes are left for it) and writes it in one write.
func sendFrame(w io.Writer, buf []byte) error {
	n := len(buf) - 4
	if n > MaxFrame {
		return fmt.Errorf("frame of %d bytes exceeds %d: %w", n, MaxFrame, core.ErrTooLarge)
	}
	binary.LittleEndian.PutUint32(buf, uint32(n))
	_, err := w.Write(buf)
	return err
}

// frameBody reads one frame and returns its body; io.EOF means the peer
// closed between frames.
func frameBody(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint32(hdr[:])
	if n > MaxFrame {
		return nil, fmt.Errorf("frame of %d bytes exceeds %d", n, MaxFrame)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("read frame body: %w", err)
	}
	return b, nil
}
