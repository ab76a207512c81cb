package sandboxinit

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
)

// A Setup travels to a new init in a binary encoding, not JSON: it is the
// first frame a freshly executed init decodes, and encoding/json's code,
// not yet paged in, made that decode cost 150 to 170 µs of every create's
// critical path; this one takes a few. Other frames stay JSON: by the time
// they come, the init has warmed the JSON codec off the critical path.
//
// The payload starts with setupMagic, then the protocol version (so a
// mismatch is reported before anything else is read), then every field of
// Setup in declaration order: strings and byte slices as a uvarint length
// and the bytes, integers as varints, booleans as one byte, lists as a
// uvarint count and the elements.

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
	e := setupEncoder{b: append(b, setupMagic)}
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
	e.uint(uint64(len(s.Hide)))
	for _, h := range s.Hide {
		e.str(h)
	}
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
	d := setupDecoder{b: b[1:]}
	*s = Setup{Proto: d.intN()}
	if d.err != nil || s.Proto != ProtocolVersion {
		// Another version's layout: only Proto is meaningful.
		return d.err
	}
	s.Rootfs = d.str()
	for n := d.count(); n > 0; n-- {
		s.Binds = append(s.Binds, Bind{Src: d.str(), Dst: d.str(), RW: d.bool(), Copy: d.bool(), Optional: d.bool()})
	}
	for n := d.count(); n > 0; n-- {
		s.Links = append(s.Links, Link{Dst: d.str(), Target: d.str()})
	}
	for n := d.count(); n > 0; n-- {
		s.Files = append(s.Files, File{Dst: d.str(), Data: d.bytes()})
	}
	for n := d.count(); n > 0; n-- {
		s.Hide = append(s.Hide, d.str())
	}
	s.TmpBytes = d.int()
	s.WorkspaceBytes = d.int()
	s.WorkspaceDir = d.str()
	s.Network = d.bool()
	s.Trace = d.bool()
	s.Hostname = d.str()
	s.FileSize = d.int()
	s.OpenFiles = d.intN()
	s.Seccomp = d.bytes()
	for n := d.count(); n > 0; n-- {
		s.CgroupTaskFDs = append(s.CgroupTaskFDs, d.intN())
	}
	s.CgroupProcsFD = d.intN()
	s.Isolation = d.str()
	s.Template = d.str()
	if d.err == nil && len(d.b) > 0 {
		d.err = fmt.Errorf("%d bytes after the last field", len(d.b))
	}
	return d.err
}

type setupEncoder struct{ b []byte }

func (e *setupEncoder) uint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *setupEncoder) int(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *setupEncoder) str(v string)  { e.uint(uint64(len(v))); e.b = append(e.b, v...) }
func (e *setupEncoder) bytes(v []byte) {
	e.uint(uint64(len(v)))
	e.b = append(e.b, v...)
}
func (e *setupEncoder) bool(v bool) {
	if v {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}

// setupDecoder reads what setupEncoder wrote. The first error sticks:
// every later read returns a zero value, and the caller checks err once.
type setupDecoder struct {
	b   []byte
	err error
}

func (d *setupDecoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("truncated or malformed %s", what)
	}
	d.b = nil
}

func (d *setupDecoder) uint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("unsigned integer")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *setupDecoder) int() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("integer")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// intN is an int-sized field: a value that does not fit is malformed.
func (d *setupDecoder) intN() int {
	v := d.int()
	if v > math.MaxInt || v < math.MinInt {
		d.fail("integer")
		return 0
	}
	return int(v)
}

// count is a list length; each element takes at least one byte, so a
// count beyond what is left is malformed (and allocates nothing).
func (d *setupDecoder) count() int {
	n := d.uint()
	if n > uint64(len(d.b)) {
		d.fail("list")
		return 0
	}
	return int(n)
}

func (d *setupDecoder) bytes() []byte {
	n := d.uint()
	if n > uint64(len(d.b)) {
		d.fail("byte string")
		return nil
	}
	if n == 0 {
		return nil
	}
	v := append([]byte(nil), d.b[:n]...)
	d.b = d.b[n:]
	return v
}

func (d *setupDecoder) str() string { return string(d.bytes()) }

func (d *setupDecoder) bool() bool {
	if len(d.b) == 0 || d.b[0] > 1 {
		d.fail("boolean")
		return false
	}
	v := d.b[0] == 1
	d.b = d.b[1:]
	return v
}
