package sandboxinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// A Setup travels to a new init in the binary encoding of bincodec.go,
// not JSON: it is the first frame a freshly executed init decodes, on
// every create's critical path, when a reflective codec's code is not yet
// paged in.
//
// The payload starts with setupMagic, then the protocol version (so a
// mismatch is reported before anything else is read), then every field of
// Setup in declaration order.

// setupMagic is the first payload byte; JSON frames start with '{'.
const setupMagic = 0xb5

// WriteSetup sends s as one frame in the binary encoding.
func WriteSetup(w io.Writer, s *Setup) error {
	return sendFrame(w, s.appendBinary([]byte{0, 0, 0, 0}))
}

// ReadSetup reads the frame WriteSetup sent. A backend of another
// protocol version gets an error naming both versions, whichever
// encoding it used.
func ReadSetup(r io.Reader) (Setup, error) {
	b, err := frameBody(r)
	if err != nil {
		return Setup{}, err
	}
	if len(b) > 0 && b[0] == '{' {
		// A backend from before the binary Setup (protocol 3 and older).
		var old struct {
			Proto int `json:"proto"`
		}
		if err := json.Unmarshal(b, &old); err != nil {
			return Setup{}, fmt.Errorf("decode setup: %w", err)
		}
		return Setup{Proto: old.Proto}, nil
	}
	var s Setup
	if err := s.unmarshalBinary(b); err != nil {
		return Setup{}, fmt.Errorf("decode setup: %w", err)
	}
	return s, nil
}

func (s *Setup) appendBinary(b []byte) []byte {
	e := encoder{b: append(b, setupMagic)}
	e.int(int64(s.Proto))
	e.str(s.Rootfs)
	e.uint(uint64(len(s.Binds)))
	for _, m := range s.Binds {
		e.str(m.Src)
		e.str(m.Dst)
		e.bool(m.RW)
		e.bool(m.Copy)
		e.bool(m.Optional)
	}
	e.uint(uint64(len(s.Links)))
	for _, l := range s.Links {
		e.str(l.Dst)
		e.str(l.Target)
	}
	e.uint(uint64(len(s.Files)))
	for _, f := range s.Files {
		e.str(f.Dst)
		e.bytes(f.Data)
	}
	e.strs(s.Hide)
	e.int(s.TmpBytes)
	e.int(s.WorkspaceBytes)
	e.str(s.WorkspaceDir)
	e.bool(s.Network)
	e.bool(s.Trace)
	e.str(s.Hostname)
	e.int(s.FileSize)
	e.int(int64(s.OpenFiles))
	e.bytes(s.Seccomp)
	e.uint(uint64(len(s.CgroupTaskFDs)))
	for _, fd := range s.CgroupTaskFDs {
		e.int(int64(fd))
	}
	e.int(int64(s.CgroupProcsFD))
	e.str(s.Isolation)
	e.str(s.Template)
	return e.b
}

func (s *Setup) unmarshalBinary(b []byte) error {
	if len(b) == 0 || b[0] != setupMagic {
		return errors.New("not a binary setup frame")
	}
	d := decoder{b: b[1:]}
	*s = Setup{Proto: d.intN()}
	if d.err != nil || s.Proto != ProtocolVersion {
		// Another version's layout: only Proto is meaningful.
		return d.err
	}
	s.Rootfs = d.str()
	for n := d.count(5, 0); n > 0 && d.err == nil; n-- {
		s.Binds = append(s.Binds, Bind{Src: d.str(), Dst: d.str(), RW: d.bool(), Copy: d.bool(), Optional: d.bool()})
	}
	for n := d.count(2, 0); n > 0 && d.err == nil; n-- {
		s.Links = append(s.Links, Link{Dst: d.str(), Target: d.str()})
	}
	for n := d.count(2, 0); n > 0 && d.err == nil; n-- {
		s.Files = append(s.Files, File{Dst: d.str(), Data: d.bytes()})
	}
	s.Hide = d.strs()
	s.TmpBytes = d.int()
	s.WorkspaceBytes = d.int()
	s.WorkspaceDir = d.str()
	s.Network = d.bool()
	s.Trace = d.bool()
	s.Hostname = d.str()
	s.FileSize = d.int()
	s.OpenFiles = d.intN()
	s.Seccomp = d.bytes()
	for n := d.count(1, 0); n > 0 && d.err == nil; n-- {
		s.CgroupTaskFDs = append(s.CgroupTaskFDs, d.intN())
	}
	s.CgroupProcsFD = d.intN()
	s.Isolation = d.str()
	s.Template = d.str()
	return d.end()
}
