// Package safetensors reads and writes Hugging Face safetensors files:
// single files and sharded checkpoints (model.safetensors.index.json),
// with BF16, F16 and F32 tensors converted to and from float32.
//
// It deliberately handles only what model weights need: no integer
// conversion, no memory mapping. The header parser treats its input as
// hostile: it bounds the header size, and rejects unknown dtypes, shapes
// whose byte length disagrees with the offsets, and offsets that overlap,
// leave holes or run past the file.
package safetensors

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"sort"
)

// MaxHeaderSize bounds the JSON header (the reference implementation uses
// 100 MB as well); a hostile 8-byte prefix cannot make us allocate more.
const MaxHeaderSize = 100 << 20

// DType is a safetensors element type name.
type DType string

// Element types this package converts.
const (
	F32  DType = "F32"
	F16  DType = "F16"
	BF16 DType = "BF16"
)

// dtypeSize returns the byte size of every dtype the format defines, so
// that files holding other tensors still parse; only F32/F16/BF16 can be
// read as float32. ok is false for unknown names.
func dtypeSize(dt DType) (size int, ok bool) {
	switch dt {
	case "BOOL", "U8", "I8", "F8_E4M3", "F8_E5M2":
		return 1, true
	case "I16", "U16", "F16", "BF16":
		return 2, true
	case "I32", "U32", "F32":
		return 4, true
	case "I64", "U64", "F64":
		return 8, true
	}
	return 0, false
}

// TensorInfo describes one tensor in a file.
type TensorInfo struct {
	Name   string
	DType  DType
	Shape  []int
	Begin  int64 // offset of the first byte, relative to the data section
	End    int64 // one past the last byte
	Elems  int
	offset int64 // absolute offset of the data section in the file
}

// Header is a parsed safetensors header.
type Header struct {
	Tensors  []TensorInfo // sorted by Begin
	Metadata map[string]string
	DataSize int64 // bytes of tensor data after the header
}

type rawEntry struct {
	DType       DType   `json:"dtype"`
	Shape       []int   `json:"shape"`
	DataOffsets []int64 `json:"data_offsets"`
}

// ParseHeader parses the 8-byte length and JSON header at the start of b
// and validates it against dataSize, the number of bytes that follow the
// header in the file. It needs only the first 8+N bytes of b.
func ParseHeader(b []byte, fileSize int64) (*Header, int64, error) {
	if len(b) < 8 {
		return nil, 0, errors.New("safetensors: file shorter than the 8-byte header length")
	}
	n := binary.LittleEndian.Uint64(b[:8])
	if n > MaxHeaderSize {
		return nil, 0, fmt.Errorf("safetensors: header length %d exceeds limit %d", n, MaxHeaderSize)
	}
	if int64(n)+8 > fileSize || uint64(len(b)) < 8+n {
		return nil, 0, fmt.Errorf("safetensors: header length %d runs past the end of the file", n)
	}
	dataStart := 8 + int64(n)
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &raw); err != nil {
		return nil, 0, fmt.Errorf("safetensors: header JSON: %w", err)
	}
	h := &Header{DataSize: fileSize - dataStart}
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &h.Metadata); err != nil {
				return nil, 0, fmt.Errorf("safetensors: __metadata__ must map strings to strings: %w", err)
			}
			continue
		}
		var e rawEntry
		if err := json.Unmarshal(msg, &e); err != nil {
			return nil, 0, fmt.Errorf("safetensors: tensor %q: %w", name, err)
		}
		size, ok := dtypeSize(e.DType)
		if !ok {
			return nil, 0, fmt.Errorf("safetensors: tensor %q: unknown dtype %q", name, e.DType)
		}
		if len(e.DataOffsets) != 2 {
			return nil, 0, fmt.Errorf("safetensors: tensor %q: data_offsets must have 2 entries", name)
		}
		elems := uint64(1)
		for _, d := range e.Shape {
			if d < 0 {
				return nil, 0, fmt.Errorf("safetensors: tensor %q: negative dimension %d", name, d)
			}
			hi, lo := bits.Mul64(elems, uint64(d))
			if hi != 0 || lo > math.MaxInt32*4 {
				return nil, 0, fmt.Errorf("safetensors: tensor %q: shape %v too large", name, e.Shape)
			}
			elems = lo
		}
		begin, end := e.DataOffsets[0], e.DataOffsets[1]
		if begin < 0 || end < begin || end > h.DataSize {
			return nil, 0, fmt.Errorf("safetensors: tensor %q: offsets [%d,%d] outside data of %d bytes", name, begin, end, h.DataSize)
		}
		if uint64(end-begin) != elems*uint64(size) {
			return nil, 0, fmt.Errorf("safetensors: tensor %q: %s%v needs %d bytes, offsets give %d", name, e.DType, e.Shape, elems*uint64(size), end-begin)
		}
		h.Tensors = append(h.Tensors, TensorInfo{Name: name, DType: e.DType, Shape: e.Shape, Begin: begin, End: end, Elems: int(elems), offset: dataStart})
	}
	slices.SortFunc(h.Tensors, func(a, b TensorInfo) int {
		return cmp.Or(cmp.Compare(a.Begin, b.Begin), cmp.Compare(a.End, b.End), cmp.Compare(a.Name, b.Name))
	})
	// The format requires the data section to be covered exactly: no
	// overlaps (two tensors aliasing bytes) and no holes.
	var at int64
	for _, t := range h.Tensors {
		if t.Begin != at {
			if t.Begin < at {
				return nil, 0, fmt.Errorf("safetensors: tensor %q overlaps the previous tensor", t.Name)
			}
			return nil, 0, fmt.Errorf("safetensors: hole in data before tensor %q", t.Name)
		}
		at = t.End
	}
	if at != h.DataSize {
		return nil, 0, fmt.Errorf("safetensors: data section has %d bytes, tensors cover %d", h.DataSize, at)
	}
	return h, dataStart, nil
}

// File is an open safetensors file.
type File struct {
	path   string
	f      *os.File
	Header *Header
	byName map[string]*TensorInfo
}

// Open reads and validates the header of a safetensors file.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	var lenBuf [8]byte
	if _, err := io.ReadFull(f, lenBuf[:]); err != nil {
		f.Close()
		return nil, fmt.Errorf("safetensors: %s: reading header length: %w", path, err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > MaxHeaderSize || int64(n)+8 > st.Size() {
		f.Close()
		return nil, fmt.Errorf("safetensors: %s: header length %d invalid for a file of %d bytes", path, n, st.Size())
	}
	buf := make([]byte, 8+n)
	copy(buf, lenBuf[:])
	if _, err := io.ReadFull(f, buf[8:]); err != nil {
		f.Close()
		return nil, fmt.Errorf("safetensors: %s: reading header: %w", path, err)
	}
	h, _, err := ParseHeader(buf, st.Size())
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	sf := &File{path: path, f: f, Header: h, byName: map[string]*TensorInfo{}}
	for i := range h.Tensors {
		sf.byName[h.Tensors[i].Name] = &h.Tensors[i]
	}
	return sf, nil
}

// Close closes the file.
func (f *File) Close() error { return f.f.Close() }

// Info returns the tensor called name.
func (f *File) Info(name string) (*TensorInfo, bool) {
	t, ok := f.byName[name]
	return t, ok
}

// ReadF32 reads tensor name, converting to float32, into dst, which must
// have exactly its element count.
func (f *File) ReadF32(name string, dst []float32) error {
	t, ok := f.byName[name]
	if !ok {
		return fmt.Errorf("safetensors: %s: no tensor %q", f.path, name)
	}
	if len(dst) != t.Elems {
		return fmt.Errorf("safetensors: %s: tensor %q has %d elements, destination %d", f.path, name, t.Elems, len(dst))
	}
	raw := make([]byte, t.End-t.Begin)
	if _, err := f.f.ReadAt(raw, t.offset+t.Begin); err != nil {
		return fmt.Errorf("safetensors: %s: reading %q: %w", f.path, name, err)
	}
	if err := Decode(dst, raw, t.DType); err != nil {
		return fmt.Errorf("safetensors: %s: %q: %w", f.path, name, err)
	}
	return nil
}

// Decode converts little-endian raw bytes of dtype into float32.
func Decode(dst []float32, raw []byte, dt DType) error {
	switch dt {
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	case BF16:
		for i := range dst {
			dst[i] = BF16ToF32(binary.LittleEndian.Uint16(raw[2*i:]))
		}
	case F16:
		for i := range dst {
			dst[i] = F16ToF32(binary.LittleEndian.Uint16(raw[2*i:]))
		}
	default:
		return fmt.Errorf("dtype %s cannot be read as float32", dt)
	}
	return nil
}

// BF16ToF32 is exact: bfloat16 is the top half of a float32.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 rounds to nearest, ties to even (as torch's .to(bfloat16)),
// and keeps NaNs NaN by setting the quiet bit instead of rounding them.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// F16ToF32 converts IEEE half precision exactly, including subnormals,
// infinities and NaN payloads.
func F16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // inf or nan
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp == 0 && man == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: value man·2^-24, normalise for float32
		e := uint32(127 - 15 + 1)
		for man&0x400 == 0 {
			man <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (man&0x3ff)<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
}

// Tensor is a named float32 tensor to write.
type Tensor struct {
	Name  string
	Shape []int
	Data  []float32
}

// Write writes tensors to path as one safetensors file in dtype (F32 or
// BF16, the latter rounded to nearest even), in the given order.
func Write(path string, tensors []Tensor, dt DType, metadata map[string]string) error {
	size := map[DType]int{F32: 4, BF16: 2}[dt]
	if size == 0 {
		return fmt.Errorf("safetensors: cannot write dtype %q (want F32 or BF16)", dt)
	}
	hdr := map[string]any{}
	if len(metadata) > 0 {
		hdr["__metadata__"] = metadata
	}
	var off int64
	for _, t := range tensors {
		n := 1
		for _, d := range t.Shape {
			n *= d
		}
		if n != len(t.Data) {
			return fmt.Errorf("safetensors: tensor %q: shape %v holds %d elements, data %d", t.Name, t.Shape, n, len(t.Data))
		}
		end := off + int64(n*size)
		hdr[t.Name] = rawEntry{DType: dt, Shape: append([]int{}, t.Shape...), DataOffsets: []int64{off, end}}
		off = end
	}
	js, err := json.Marshal(hdr)
	if err != nil {
		return fmt.Errorf("safetensors: encode header: %w", err)
	}
	for len(js)%8 != 0 { // align the data section, as the reference writer does
		js = append(js, ' ')
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	w := &errWriter{w: f}
	var lb [8]byte
	binary.LittleEndian.PutUint64(lb[:], uint64(len(js)))
	w.write(lb[:])
	w.write(js)
	buf := make([]byte, 0, 1<<20)
	for _, t := range tensors {
		for _, v := range t.Data {
			if dt == F32 {
				buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
			} else {
				buf = binary.LittleEndian.AppendUint16(buf, F32ToBF16(v))
			}
			if len(buf) >= 1<<20 {
				w.write(buf)
				buf = buf[:0]
			}
		}
	}
	w.write(buf)
	if err := cmp.Or(w.err, f.Close()); err != nil {
		return fmt.Errorf("safetensors: writing %s: %w", path, err)
	}
	return nil
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) write(b []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(b)
	}
}

// Checkpoint is a model directory's weights: model.safetensors, or the
// shards listed by model.safetensors.index.json.
type Checkpoint struct {
	files  []*File
	byName map[string]*File
}

type index struct {
	WeightMap map[string]string `json:"weight_map"`
}

// OpenDir opens the weights of a Hugging Face model directory.
func OpenDir(dir string) (*Checkpoint, error) {
	c := &Checkpoint{byName: map[string]*File{}}
	idxPath := filepath.Join(dir, "model.safetensors.index.json")
	if b, err := os.ReadFile(idxPath); err == nil {
		var idx index
		if err := json.Unmarshal(b, &idx); err != nil {
			return nil, fmt.Errorf("safetensors: %s: %w", idxPath, err)
		}
		shards := map[string]*File{}
		names := make([]string, 0, len(idx.WeightMap))
		for n := range idx.WeightMap {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, name := range names {
			shard := idx.WeightMap[name]
			if filepath.Base(shard) != shard {
				c.Close()
				return nil, fmt.Errorf("safetensors: %s: shard %q must be a file name in the directory", idxPath, shard)
			}
			f, ok := shards[shard]
			if !ok {
				var err error
				if f, err = Open(filepath.Join(dir, shard)); err != nil {
					c.Close()
					return nil, err
				}
				shards[shard] = f
				c.files = append(c.files, f)
			}
			if _, ok := f.Info(name); !ok {
				c.Close()
				return nil, fmt.Errorf("safetensors: %s lists %q in %s, which does not hold it", idxPath, name, shard)
			}
			c.byName[name] = f
		}
		return c, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	f, err := Open(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		return nil, err
	}
	c.files = append(c.files, f)
	for _, t := range f.Header.Tensors {
		c.byName[t.Name] = f
	}
	return c, nil
}

// Info returns the description of tensor name.
func (c *Checkpoint) Info(name string) (*TensorInfo, bool) {
	f, ok := c.byName[name]
	if !ok {
		return nil, false
	}
	return f.Info(name)
}

// ReadF32 reads tensor name as float32 into dst.
func (c *Checkpoint) ReadF32(name string, dst []float32) error {
	f, ok := c.byName[name]
	if !ok {
		return fmt.Errorf("safetensors: checkpoint has no tensor %q", name)
	}
	return f.ReadF32(name, dst)
}

// Names lists all tensor names, sorted.
func (c *Checkpoint) Names() []string {
	n := make([]string, 0, len(c.byName))
	for k := range c.byName {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// Close closes all shard files.
func (c *Checkpoint) Close() error {
	var errs []error
	for _, f := range c.files {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}

// WriteIndex writes model.safetensors.index.json for shards written by
// the caller, mapping each tensor name to its shard file name.
func WriteIndex(dir string, weightMap map[string]string, totalSize int64) error {
	b, err := json.MarshalIndent(map[string]any{
		"metadata":   map[string]any{"total_size": totalSize},
		"weight_map": weightMap,
	}, "", "  ")
	if err != nil {
		return fmt.Errorf("safetensors: encode index: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), b, 0o644); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}
