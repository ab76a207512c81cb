package sandboxinit

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// The binary encoding of the frames between the backend and an init (the
// Setup, requests and responses): every field in declaration order, strings
// and byte slices as a uvarint length and the bytes, integers as varints,
// floats as their IEEE 754 bits, booleans as one byte, optional structs as
// a boolean and the struct, lists as a uvarint count and the elements.
// Unlike encoding/json it needs no reflection, so its first use in a fresh
// init costs nothing to warm up, and a frame costs a few allocations and
// copies to encode and decode, on every exec's path.

type encoder struct{ b []byte }

func (e *encoder) uint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) int(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *encoder) str(v string)  { e.uint(uint64(len(v))); e.b = append(e.b, v...) }
func (e *encoder) bytes(v []byte) {
	e.uint(uint64(len(v)))
	e.b = append(e.b, v...)
}
func (e *encoder) bool(v bool) {
	if v {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}

// decoder reads what encoder wrote. The first error sticks:
// every later read returns a zero value, and the caller checks err once.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("truncated or malformed %s", what)
	}
	d.b = nil
}

func (d *decoder) uint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("unsigned integer")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) int() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("integer")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// intN is an int-sized field: a value that does not fit is malformed.
func (d *decoder) intN() int {
	v := d.int()
	if v > math.MaxInt || v < math.MinInt {
		d.fail("integer")
		return 0
	}
	return int(v)
}

// count is a list length. Each element takes at least minSize bytes, so a
// count beyond what is left is malformed, and so is one above max (when
// max > 0): a hostile frame cannot make the decoder allocate much more
// than its own size. Lists are read with "n > 0 && d.err == nil", so a
// malformed element ends the list too.
func (d *decoder) count(minSize, max int) int {
	n := d.uint()
	if n > uint64(len(d.b)/minSize) || (max > 0 && n > uint64(max)) {
		d.fail("list")
		return 0
	}
	return int(n)
}

// bytes returns a slice of the frame, not a copy: every frame is decoded
// from a buffer of its own (frameBody), which nothing reuses.
func (d *decoder) bytes() []byte {
	n := d.uint()
	if n > uint64(len(d.b)) {
		d.fail("byte string")
		return nil
	}
	if n == 0 {
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) str() string { return string(d.bytes()) }

func (d *decoder) bool() bool {
	if len(d.b) == 0 || d.b[0] > 1 {
		d.fail("boolean")
		return false
	}
	v := d.b[0] == 1
	d.b = d.b[1:]
	return v
}

func (e *encoder) float(v float64) { e.b = binary.LittleEndian.AppendUint64(e.b, math.Float64bits(v)) }
func (e *encoder) strs(v []string) {
	e.uint(uint64(len(v)))
	for _, s := range v {
		e.str(s)
	}
}
func (e *encoder) time(v time.Time) {
	e.int(v.Unix())
	e.int(int64(v.Nanosecond()))
}

func (d *decoder) float() float64 {
	if len(d.b) < 8 {
		d.fail("float")
		return 0
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(d.b))
	d.b = d.b[8:]
	return v
}

func (d *decoder) strs() []string {
	var v []string
	for n := d.count(1, 0); n > 0 && d.err == nil; n-- {
		v = append(v, d.str())
	}
	return v
}

func (d *decoder) time() time.Time {
	sec, nsec := d.int(), d.int()
	if nsec < 0 || nsec >= 1e9 {
		d.fail("time")
		return time.Time{}
	}
	return time.Unix(sec, nsec)
}

// end fails unless every byte was read.
func (d *decoder) end() error {
	if d.err == nil && len(d.b) > 0 {
		d.err = fmt.Errorf("%d bytes after the last field", len(d.b))
	}
	return d.err
}

// uint32 is a 32-bit field: a value that does not fit is malformed.
func (d *decoder) uint32() uint32 {
	v := d.uint()
	if v > math.MaxUint32 {
		d.fail("unsigned integer")
		return 0
	}
	return uint32(v)
}
