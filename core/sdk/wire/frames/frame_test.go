package frames

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/rlhost/rlhost/core/sdk/wire/rlhostpb"
)

func header(n uint32) []byte {
	return binary.BigEndian.AppendUint32(nil, n)
}

func TestFrameRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		msg  *rlhostpb.LentCall
	}{
		{"empty", &rlhostpb.LentCall{}},
		{"cancel", &rlhostpb.LentCall{Id: 1<<64 - 1, Call: &rlhostpb.LentCall_Cancel{Cancel: &rlhostpb.Empty{}}}},
		{"write with data", &rlhostpb.LentCall{Id: 7, Call: &rlhostpb.LentCall_WriteFile{WriteFile: &rlhostpb.WriteFileRequest{
			SandboxId: "sb", Path: []byte("a\x00b"), Data: bytes.Repeat([]byte{0xff}, 3<<20), Mode: 0o600}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			// Two frames back to back: the reader must stop at each's end.
			for range 2 {
				if err := Write(&buf, tc.msg); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 2 {
				got := &rlhostpb.LentCall{}
				if err := Read(&buf, got); err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				if !proto.Equal(got, tc.msg) {
					t.Fatalf("frame %d: got %v", i, got)
				}
			}
			if err := Read(&buf, &rlhostpb.LentCall{}); err != io.EOF {
				t.Fatalf("after the last frame: %v, want EOF", err)
			}
		})
	}
}

func TestReadFrameRefusesBadInput(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
		want string // in the error; "" for io.EOF
	}{
		{"nothing", nil, ""},
		{"half a header", []byte{0, 0}, "unexpected EOF"},
		{"length over MaxSize", header(MaxSize + 1), "exceeds"},
		{"largest length, no body", header(1<<32 - 1), "exceeds"},
		{"truncated body", append(header(10), 1, 2, 3), "unexpected EOF"},
		{"body ends at the header", header(5), "unexpected EOF"},
		{"not protobuf", append(header(3), 0xff, 0xff, 0xff), "decode frame"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := Read(bytes.NewReader(tc.in), &rlhostpb.LentCall{})
			switch {
			case tc.want == "" && err != io.EOF:
				t.Fatalf("got %v, want EOF", err)
			case tc.want != "" && (err == nil || errors.Is(err, io.EOF) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// A frame's claimed length is only believed as far as bytes arrive: a lying
// header of MaxSize reserves at most growStep.
func TestReadFrameDoesNotTrustTheLength(t *testing.T) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_ = Read(bytes.NewReader(header(MaxSize)), &rlhostpb.LentCall{})
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 4*growStep {
		t.Fatalf("a %d-byte claim with no body allocated %d bytes", MaxSize, grew)
	}
}

// stuttering yields at most chunk bytes per Read, and fails every other
// Read with a timeout, as a reader cut off by a deadline sees it.
type stuttering struct {
	data  []byte
	chunk int
	fail  bool
}

var errCutOff = errors.New("cut off")

func (s *stuttering) Read(p []byte) (int, error) {
	if s.fail = !s.fail; s.fail {
		return 0, errCutOff
	}
	if len(s.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), s.chunk)], s.data)
	s.data = s.data[n:]
	return n, nil
}

// A frame read in pieces, with reads failing between them, comes out whole
// once the reads are resumed; so does the next frame behind it.
func TestFrameReaderResumes(t *testing.T) {
	call := func(id uint64, n int) *rlhostpb.LentCall {
		return &rlhostpb.LentCall{Id: id, Call: &rlhostpb.LentCall_WriteFile{WriteFile: &rlhostpb.WriteFileRequest{
			SandboxId: "sb", Path: []byte("f"), Data: bytes.Repeat([]byte{7}, n)}}}
	}
	cancel := &rlhostpb.LentCall{Id: 9, Call: &rlhostpb.LentCall_Cancel{Cancel: &rlhostpb.Empty{}}}
	cases := []struct {
		chunk  int
		frames []*rlhostpb.LentCall
	}{
		{1, []*rlhostpb.LentCall{call(1, 100), cancel}},
		{3, []*rlhostpb.LentCall{call(1, 5000), cancel}},
		{4096, []*rlhostpb.LentCall{call(1, 3*growStep+5), cancel}},
		{growStep + 1, []*rlhostpb.LentCall{call(1, 3*growStep+5), call(2, 0)}},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("chunks of %d", tc.chunk), func(t *testing.T) {
			var buf bytes.Buffer
			for _, m := range tc.frames {
				if err := Write(&buf, m); err != nil {
					t.Fatal(err)
				}
			}
			fr := frameReader{r: &stuttering{data: buf.Bytes(), chunk: tc.chunk}}
			for _, want := range tc.frames {
				got := &rlhostpb.LentCall{}
				var err error
				for err = fr.read(got); errors.Is(err, errCutOff); err = fr.read(got) {
				}
				if err != nil || !proto.Equal(got, want) {
					t.Fatalf("frame %d: %v", want.GetId(), err)
				}
			}
			if err := fr.read(&rlhostpb.LentCall{}); !errors.Is(err, errCutOff) && err != io.EOF {
				t.Fatalf("after the last frame: %v", err)
			}
		})
	}
}

// FuzzReadFrame: whatever a plugin sends, reading it returns (a message or
// an error) and never panics; what it decodes re-encodes to a frame that
// reads back the same.
func FuzzReadFrame(f *testing.F) {
	ok, _ := Encode(&rlhostpb.LentCall{Id: 3, Call: &rlhostpb.LentCall_Exec{Exec: &rlhostpb.ExecRequest{SandboxId: "s", Command: [][]byte{[]byte("true")}}}})
	f.Add(ok)
	f.Add(header(MaxSize + 1))
	f.Add(append(header(2), 0x08))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		got := &rlhostpb.LentCall{}
		if err := Read(bytes.NewReader(in), got); err != nil {
			return
		}
		b, err := Encode(got)
		if err != nil {
			t.Fatalf("re-encode %v: %v", got, err)
		}
		again := &rlhostpb.LentCall{}
		if err := Read(bytes.NewReader(b), again); err != nil || !proto.Equal(got, again) {
			t.Fatalf("re-read %v: %v, %v", got, again, err)
		}
	})
}
