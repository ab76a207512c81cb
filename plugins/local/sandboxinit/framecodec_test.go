package sandboxinit

import (
	"bytes"
	"io"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
)

// requireEveryField fails the test if v (a struct, or a pointer to one)
// leaves a field zero, looking inside nested structs and the first element
// of lists: a field added to a frame type must be set in the full values
// below, and the round trip then fails until framecodec.go encodes it.
func requireEveryField(t testing.TB, path string, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.Pointer:
		requireEveryField(t, path, v.Elem())
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Struct && v.Len() > 0 {
			requireEveryField(t, path+"[0]", v.Index(0))
		}
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			return
		}
		for i := 0; i < v.NumField(); i++ {
			f := v.Field(i)
			name := path + "." + v.Type().Field(i).Name
			if f.IsZero() {
				t.Fatalf("%s is zero in the full value: set it, and encode it in framecodec.go", name)
			}
			requireEveryField(t, name, f)
		}
	}
}

func fullRequest(t testing.TB) Request {
	r := Request{
		ID: 1<<64 - 1, Op: "exec", Pgid: -7, Path: "work/a b.py", Data: []byte{0, 0xff, '\n'}, Mode: 0o4755, Max: 1 << 40,
		Exec: &ExecSpec{
			Argv: []string{"python3", "-c", "print('é\x00')"}, Env: []string{"A=1", "EMPTY="}, Dir: "/workspace/sub",
			Stdin: []byte("in\x00put"), Timeout: 90 * time.Second, MaxOutput: 1 << 20, CPUTime: time.Second,
			AddressSpace: 1 << 30, FileSize: -1, OpenFiles: 1024, Nproc: 64,
		},
	}
	requireEveryField(t, "Request", reflect.ValueOf(r))
	return r
}

func fullResponse(t testing.TB) Response {
	r := Response{
		ID: 42, Err: "read x: no such file", ErrKind: "not_found", Pgid: 99,
		Exec: &core.ExecResult{
			ExitCode: -1, Stdout: "out\xff\xfe not UTF-8", Stderr: "err", TimedOut: true, Duration: 1500 * time.Microsecond, DurationMS: 1.5,
			Signal: "SIGKILL", OOMKilled: true, PidsExceeded: true, CPUTimeExceeded: true, OutputTruncated: true,
			Isolation: "namespaces (seccomp off)",
		},
		Data: []byte("file body"),
		Files: []core.FileInfo{
			{Path: "a/b", Size: 12, Mode: 0o644, IsDir: true, ModTime: time.Unix(1795000000, 123456789)},
			{Path: "old", ModTime: time.Unix(-1, 999999999)},
		},
	}
	requireEveryField(t, "Response", reflect.ValueOf(r))
	return r
}

// roundTrip writes in with write and reads it back with read, and fails
// unless both the value and the stream come back whole. adjust, when not
// nil, undoes what the encoding may legitimately change in got.
func roundTrip[T any](t *testing.T, in T, write func(io.Writer, *T) error, read func(io.Reader) (T, error), adjust func(got, want *T)) {
	t.Helper()
	var buf bytes.Buffer
	if err := write(&buf, &in); err != nil {
		t.Fatal(err)
	}
	got, err := read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if adjust != nil {
		adjust(&got, &in)
	}
	if !reflect.DeepEqual(got, in) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, in)
	}
	if buf.Len() != 0 {
		t.Fatalf("%d bytes left unread", buf.Len())
	}
}

func TestRequestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   Request
	}{
		{"every field", fullRequest(t)},
		{"a cancel", Request{ID: 3, Op: "cancel"}},
		{"an exec of nothing much", Request{ID: 4, Op: "exec", Exec: &ExecSpec{Argv: []string{"true"}}}},
		{"zero", Request{}},
	} {
		t.Run(tc.name, func(t *testing.T) { roundTrip(t, tc.in, WriteRequest, ReadRequest, nil) })
	}
}

func TestResponseRoundTrip(t *testing.T) {
	// Times compare as instants: the decoded one is in Local.
	sameInstants := func(got, want *Response) {
		for i := range got.Files {
			if w := want.Files[i].ModTime; got.Files[i].ModTime.Equal(w) && got.Files[i].ModTime.IsZero() == w.IsZero() {
				got.Files[i].ModTime = w
			}
		}
	}
	for _, tc := range []struct {
		name string
		in   Response
	}{
		{"every field", fullResponse(t)},
		{"ready", Response{}},
		{"an exec result", Response{ID: 9, Exec: &core.ExecResult{ExitCode: 1, DurationMS: 0.25, Stdout: "1\n"}}},
		{"a zero time", Response{Files: []core.FileInfo{{Path: "x"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) { roundTrip(t, tc.in, WriteResponse, ReadResponse, sameInstants) })
	}
}

// A frame of the other kind, truncated, padded or oversized is refused,
// never misread.
func TestFramesRefused(t *testing.T) {
	frame := func(write func(*bytes.Buffer) error) []byte {
		var b bytes.Buffer
		if err := write(&b); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	req, resp := fullRequest(t), fullResponse(t)
	reqFrame := frame(func(b *bytes.Buffer) error { return WriteRequest(b, &req) })
	respFrame := frame(func(b *bytes.Buffer) error { return WriteResponse(b, &resp) })
	// The same body with its length prefix changed to cover n bytes.
	resized := func(f []byte, n int) []byte {
		out := append([]byte{byte(n), byte(n >> 8), byte(n >> 16), byte(n >> 24)}, f[4:]...)
		if n < len(f)-4 {
			return out[:4+n]
		}
		return append(out, make([]byte, n-(len(f)-4))...)
	}
	for _, tc := range []struct {
		name    string
		frame   []byte
		request bool
		want    string
	}{
		{"a response read as a request", respFrame, true, "not a request frame"},
		{"a request read as a response", reqFrame, false, "not a response frame"},
		{"a JSON request of an older build", []byte("\x0b\x00\x00\x00{\"id\":1234}"), true, "not a request frame"},
		{"a truncated request", resized(reqFrame, len(reqFrame)-10), true, "truncated or malformed"},
		{"a request with bytes after it", resized(reqFrame, len(reqFrame)), true, "after the last field"},
		{"a truncated response", resized(respFrame, len(respFrame)/2), false, "truncated or malformed"},
		{"a frame beyond the limit", []byte{0xff, 0xff, 0xff, 0xff}, true, "exceeds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.request {
				_, err = ReadRequest(bytes.NewReader(tc.frame))
			} else {
				_, err = ReadResponse(bytes.NewReader(tc.frame))
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// fuzzRoundTrip checks that whatever read accepts re-encodes to a frame
// that reads back to the same value. Values are compared encoded:
// DeepEqual holds no NaN equal to itself.
func fuzzRoundTrip[T any](t *testing.T, data []byte, write func(io.Writer, *T) error, read func(io.Reader) (T, error)) {
	r, err := read(bytes.NewReader(data))
	if err != nil {
		return
	}
	var out, again bytes.Buffer
	if err := write(&out, &r); err != nil {
		t.Fatalf("re-encode: %v", err)
	}
	first := bytes.Clone(out.Bytes())
	r2, err := read(&out)
	if err != nil {
		t.Fatalf("decode the re-encoded %+v: %v", r, err)
	}
	if err := write(&again, &r2); err != nil || !bytes.Equal(first, again.Bytes()) {
		t.Fatalf("round trip: %+v vs %+v (%v)", r, r2, err)
	}
}

func FuzzReadRequest(f *testing.F) {
	for _, r := range []Request{fullRequest(f), {ID: 1, Op: "exec", Exec: &ExecSpec{Argv: []string{"true"}}}} {
		var b bytes.Buffer
		WriteRequest(&b, &r)
		f.Add(b.Bytes())
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{2, 0, 0, 0, requestMagic, 0x80})
	f.Fuzz(func(t *testing.T, data []byte) { fuzzRoundTrip(t, data, WriteRequest, ReadRequest) })
}

func FuzzReadResponse(f *testing.F) {
	for _, r := range []Response{fullResponse(f), {}} {
		var b bytes.Buffer
		WriteResponse(&b, &r)
		f.Add(b.Bytes())
	}
	f.Add([]byte{3, 0, 0, 0, responseMagic, 1, 0x80})
	f.Fuzz(func(t *testing.T, data []byte) { fuzzRoundTrip(t, data, WriteResponse, ReadResponse) })
}

// An init of an older build refuses the Setup with a JSON error naming
// both protocol versions; the backend must show that error, not a
// decoding failure.
func TestResponseOfAnOlderHelper(t *testing.T) {
	const msg = "helper speaks sandbox protocol 4, the backend 5: rebuild the helper binary"
	var b bytes.Buffer
	sendFrame(&b, append(make([]byte, 4), `{"err":"`+msg+`"}`...))
	got, err := ReadResponse(&b)
	if err != nil || got.Err != msg {
		t.Fatalf("got %+v, %v; want the helper's error", got, err)
	}
}

// A hostile init cannot make the backend allocate far more than the frame
// it sends: list counts are bounded by the bytes left and by the most the
// init may send, and a malformed element ends the list.
func TestHostileListsAllocateLittle(t *testing.T) {
	// A response with everything empty up to Files, then count and body.
	frame := func(count uint64, body []byte) []byte {
		e := encoder{b: append(make([]byte, 4), responseMagic)}
		var empty Response
		empty.encode(&e)
		e.b = e.b[:len(e.b)-1] // the empty Files count
		e.uint(count)
		e.b = append(e.b, body...)
		var out bytes.Buffer
		if err := sendFrame(&out, e.b); err != nil {
			t.Fatal(err)
		}
		return out.Bytes()
	}
	zeros := make([]byte, 1<<20)                           // valid 6-byte entries, all zero
	badThird := append(make([]byte, 12), 0, 0, 0, 2, 0, 0) // IsDir = 2
	for _, tc := range []struct {
		name  string
		frame []byte
	}{
		{"more entries than the init may list", frame(uint64(len(zeros)/6), zeros)},
		{"a count far beyond the bytes", frame(1<<40, zeros[:64])},
		{"a count the bytes could hold if entries were 1 byte", frame(1000, zeros[:1000])},
		{"a malformed entry early in a long list", frame(50000, append(badThird, zeros[:299982]...))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, err := ReadResponse(bytes.NewReader(tc.frame))
			runtime.ReadMemStats(&after)
			if err == nil {
				t.Fatal("accepted")
			}
			if got := after.TotalAlloc - before.TotalAlloc; got > 4*uint64(len(tc.frame))+1<<16 {
				t.Fatalf("decoding a %d-byte frame allocated %d bytes", len(tc.frame), got)
			}
		})
	}
}
