package local

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/rlhost/rlhost/core"
)

// The backend and a sandbox init exchange length-prefixed JSON frames over
// a stream socketpair. Requests carry an ID so several can be in flight.

const maxFrame = 512 << 20 // a frame carries at most a file or two output caps

type request struct {
	ID   uint64    `json:"id"`
	Op   string    `json:"op"` // exec, cancel, killpg, read, write, list, ping
	Pgid int       `json:"pgid,omitempty"`
	Exec *execSpec `json:"exec,omitempty"`
	Path string    `json:"path,omitempty"`
	Data []byte    `json:"data,omitempty"`
	Mode uint32    `json:"mode,omitempty"`
	Max  int64     `json:"max,omitempty"`
}

type response struct {
	ID      uint64           `json:"id"`
	Err     string           `json:"err,omitempty"`
	ErrKind string           `json:"err_kind,omitempty"`
	Exec    *core.ExecResult `json:"exec,omitempty"`
	// Output travels as bytes: JSON strings would replace invalid UTF-8.
	Stdout []byte          `json:"stdout,omitempty"`
	Stderr []byte          `json:"stderr,omitempty"`
	Pgid   int             `json:"pgid,omitempty"` // process group of an exec, for killpg
	Data   []byte          `json:"data,omitempty"`
	Files  []core.FileInfo `json:"files,omitempty"`
}

// errKind and kindErr carry core sentinel errors across the socket.
func errKind(err error) string {
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

func kindErr(kind, msg string) error {
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

func writeFrame(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode frame: %w", err)
	}
	if len(b) > maxFrame {
		return fmt.Errorf("frame of %d bytes exceeds %d: %w", len(b), maxFrame, core.ErrTooLarge)
	}
	buf := make([]byte, 4+len(b))
	binary.LittleEndian.PutUint32(buf, uint32(len(b)))
	copy(buf[4:], b)
	_, err = w.Write(buf)
	return err
}

func readFrame(r io.Reader, v any) error {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return err
	}
	n := binary.LittleEndian.Uint32(hdr[:])
	if n > maxFrame {
		return fmt.Errorf("frame of %d bytes exceeds %d", n, maxFrame)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return fmt.Errorf("read frame body: %w", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decode frame: %w", err)
	}
	return nil
}
