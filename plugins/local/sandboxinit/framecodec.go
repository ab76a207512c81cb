package sandboxinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/rlhost/rlhost/core"
)

// Requests and responses travel in the binary encoding of bincodec.go,
// not a reflective codec: every exec's round trip pays for the encoding
// twice, and a fresh init would have to warm a reflective codec while its
// first exec is already waiting. Each payload starts with its magic byte,
// so a frame of the wrong kind or from an older build is refused rather
// than misread.
const (
	requestMagic  = 0xb6
	responseMagic = 0xb7
)

// WriteRequest sends r as one frame.
func WriteRequest(w io.Writer, r *Request) error {
	size := 256 + len(r.Data)
	if r.Exec != nil {
		size += len(r.Exec.Stdin)
	}
	e := encoder{b: append(make([]byte, 4, size), requestMagic)}
	r.encode(&e)
	return sendFrame(w, e.b)
}

// ReadRequest reads one frame WriteRequest sent; io.EOF means the peer
// closed between frames.
func ReadRequest(r io.Reader) (Request, error) {
	b, err := frameBody(r)
	if err != nil {
		return Request{}, err
	}
	var req Request
	if err := req.unmarshalBinary(b); err != nil {
		return Request{}, fmt.Errorf("decode request: %w", err)
	}
	return req, nil
}

// WriteResponse sends r as one frame.
func WriteResponse(w io.Writer, r *Response) error {
	size := 256 + len(r.Data)
	if r.Exec != nil {
		size += len(r.Exec.Stdout) + len(r.Exec.Stderr)
	}
	e := encoder{b: append(make([]byte, 4, size), responseMagic)}
	r.encode(&e)
	return sendFrame(w, e.b)
}

// ReadResponse reads one frame WriteResponse sent.
func ReadResponse(r io.Reader) (Response, error) {
	b, err := frameBody(r)
	if err != nil {
		return Response{}, err
	}
	if len(b) > 0 && b[0] == '{' {
		// An init of protocol 4 or older answers a Setup it cannot serve
		// with a JSON error naming both versions: pass that on.
		var old struct {
			ID  uint64 `json:"id"`
			Err string `json:"err"`
		}
		if err := json.Unmarshal(b, &old); err != nil || old.Err == "" {
			return Response{}, errors.New("decode response: a JSON frame from a helper binary of an older build")
		}
		return Response{ID: old.ID, Err: old.Err}, nil
	}
	var resp Response
	if err := resp.unmarshalBinary(b); err != nil {
		return Response{}, fmt.Errorf("decode response: %w", err)
	}
	return resp, nil
}

func (r *Request) encode(e *encoder) {
	e.uint(r.ID)
	e.str(r.Op)
	e.int(int64(r.Pgid))
	e.bool(r.Exec != nil)
	if r.Exec != nil {
		r.Exec.encode(e)
	}
	e.str(r.Path)
	e.bytes(r.Data)
	e.uint(uint64(r.Mode))
	e.int(r.Max)
}

func (r *Request) unmarshalBinary(b []byte) error {
	if len(b) == 0 || b[0] != requestMagic {
		return errors.New("not a request frame (a helper binary from another build?)")
	}
	d := decoder{b: b[1:]}
	r.ID = d.uint()
	r.Op = d.str()
	r.Pgid = d.intN()
	if d.bool() {
		r.Exec = new(ExecSpec)
		r.Exec.decode(&d)
	}
	r.Path = d.str()
	r.Data = d.bytes()
	r.Mode = d.uint32()
	r.Max = d.int()
	return d.end()
}

func (s *ExecSpec) encode(e *encoder) {
	e.strs(s.Argv)
	e.strs(s.Env)
	e.str(s.Dir)
	e.bytes(s.Stdin)
	e.int(int64(s.Timeout))
	e.int(s.MaxOutput)
	e.int(int64(s.CPUTime))
	e.int(s.AddressSpace)
	e.int(s.FileSize)
	e.int(int64(s.OpenFiles))
	e.int(int64(s.Nproc))
}

func (s *ExecSpec) decode(d *decoder) {
	s.Argv = d.strs()
	s.Env = d.strs()
	s.Dir = d.str()
	s.Stdin = d.bytes()
	s.Timeout = time.Duration(d.int())
	s.MaxOutput = d.int()
	s.CPUTime = time.Duration(d.int())
	s.AddressSpace = d.int()
	s.FileSize = d.int()
	s.OpenFiles = d.intN()
	s.Nproc = d.intN()
}

func (r *Response) encode(e *encoder) {
	e.uint(r.ID)
	e.str(r.Err)
	e.str(r.ErrKind)
	e.bool(r.Exec != nil)
	if x := r.Exec; x != nil {
		e.int(int64(x.ExitCode))
		e.str(x.Stdout)
		e.str(x.Stderr)
		e.bool(x.TimedOut)
		e.int(int64(x.Duration))
		e.float(x.DurationMS)
		e.str(x.Signal)
		e.bool(x.OOMKilled)
		e.bool(x.PidsExceeded)
		e.bool(x.CPUTimeExceeded)
		e.bool(x.OutputTruncated)
		e.str(x.Isolation)
	}
	e.int(int64(r.Pgid))
	e.bytes(r.Data)
	e.uint(uint64(len(r.Files)))
	for _, f := range r.Files {
		e.str(f.Path)
		e.int(f.Size)
		e.uint(uint64(f.Mode))
		e.bool(f.IsDir)
		e.time(f.ModTime)
	}
}

func (r *Response) unmarshalBinary(b []byte) error {
	if len(b) == 0 || b[0] != responseMagic {
		return errors.New("not a response frame (a helper binary from another build?)")
	}
	d := decoder{b: b[1:]}
	r.ID = d.uint()
	r.Err = d.str()
	r.ErrKind = d.str()
	if d.bool() {
		r.Exec = &core.ExecResult{
			ExitCode:        d.intN(),
			Stdout:          d.str(),
			Stderr:          d.str(),
			TimedOut:        d.bool(),
			Duration:        time.Duration(d.int()),
			DurationMS:      d.float(),
			Signal:          d.str(),
			OOMKilled:       d.bool(),
			PidsExceeded:    d.bool(),
			CPUTimeExceeded: d.bool(),
			OutputTruncated: d.bool(),
			Isolation:       d.str(),
		}
	}
	r.Pgid = d.intN()
	r.Data = d.bytes()
	// At least 6 bytes each, and the init lists at most MaxListEntries.
	for n := d.count(6, MaxListEntries); n > 0 && d.err == nil; n-- {
		r.Files = append(r.Files, core.FileInfo{Path: d.str(), Size: d.int(), Mode: d.uint32(), IsDir: d.bool(), ModTime: d.time()})
	}
	return d.end()
}
