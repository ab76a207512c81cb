// Package frames is rlhost's framed wire: length-prefixed protobuf frames
// on a Unix socket, in place of gRPC where a hop sits on every turn's
// latency path. A frame is a 4-byte big-endian length and then a message.
// Two wires use it:
//
//   - the lent sandbox (core/sdk/wire/lend): the host, or a backend, serves
//     an env plugin's calls on the sandboxes it lends, rlhostpb.LentCall
//     (plugin to host) and rlhostpb.LentReply (host to plugin);
//   - the episode socket: an env plugin serves the host's NewEpisode, Step
//     and End, rlhostpb.EnvCall (host to plugin) and rlhostpb.EnvReply
//     (plugin to host).
//
// Calls carry an id chosen by the caller, run concurrently on one
// connection, and are answered by id; a cancel frame stops a call whose
// caller gave up. Conn is the caller's end and Serve the callee's, for any
// call and reply messages that fit Call and Reply.
//
// One round trip costs two writes and two reads, where gRPC's HTTP/2
// framing costs several more packets and goroutine hand-offs per call. It
// deliberately knows nothing of what the calls mean; the sockets' kinds
// are listed here so that what a killed process left can be swept.
package frames

import (
	"encoding/binary"
	"fmt"
	"io"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/sdk/pluginbase"
)

// MaxSize bounds one frame's body: the gRPC message limit between host and
// plugins, which the lent sandbox's messages had before, plus room for the
// frame's own id and tags.
const MaxSize = pluginbase.MaxMessageBytes + 64

// headerBytes is the length prefix.
const headerBytes = 4

// growStep is the most Read allocates ahead of the bytes it has read.
const growStep = 1 << 20

// Encode returns m as one frame, length prefix included. A message
// over MaxSize is ErrTooLarge.
func Encode(m proto.Message) ([]byte, error) {
	buf := make([]byte, headerBytes, headerBytes+proto.Size(m))
	buf, err := proto.MarshalOptions{}.MarshalAppend(buf, m)
	if err != nil {
		return nil, fmt.Errorf("encode frame: %w", err)
	}
	n := len(buf) - headerBytes
	if n > MaxSize {
		return nil, fmt.Errorf("frame of %d bytes exceeds %d: %w", n, MaxSize, core.ErrTooLarge)
	}
	binary.BigEndian.PutUint32(buf, uint32(n))
	return buf, nil
}

// Write writes m as one frame, in one write so that writers the
// caller serialises never leave a partial frame between others.
func Write(w io.Writer, m proto.Message) error {
	buf, err := Encode(m)
	if err != nil {
		return err
	}
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("write frame: %w", err)
	}
	return nil
}

// Read reads one frame into m. A length over MaxSize is refused before
// anything is allocated for it. io.EOF means the peer closed between frames.
func Read(r io.Reader, m proto.Message) error {
	return (&frameReader{r: r}).read(m)
}

// frameReader reads frames from r and can be resumed: a read that fails
// part-way (a deadline that interrupts a waiting caller, see Conn) keeps
// what it read, and the next read goes on from there.
type frameReader struct {
	r    io.Reader
	hdr  [headerBytes]byte
	hn   int    // header bytes read so far
	body []byte // body bytes read so far, once the header is whole
}

func (f *frameReader) read(m proto.Message) error {
	for f.hn < headerBytes {
		k, err := f.r.Read(f.hdr[f.hn:])
		f.hn += k
		if err != nil && f.hn < headerBytes {
			if f.hn > 0 {
				return noEOF(err)
			}
			return err // io.EOF: a clean end
		}
	}
	n := int(binary.BigEndian.Uint32(f.hdr[:]))
	if n > MaxSize {
		return fmt.Errorf("frame of %d bytes exceeds %d", n, MaxSize)
	}
	if f.body == nil {
		// A large body's buffer grows as the bytes arrive, not to the
		// peer's claim at once: a length that is a lie costs no more memory
		// than the bytes really sent.
		f.body = make([]byte, 0, min(n, growStep))
	}
	for len(f.body) < n {
		if len(f.body) == cap(f.body) {
			f.body = slices.Grow(f.body, min(n-len(f.body), growStep))
		}
		k, err := f.r.Read(f.body[len(f.body):min(n, cap(f.body))])
		f.body = f.body[:len(f.body)+k]
		if err != nil && len(f.body) < n {
			return fmt.Errorf("read frame body: %w", noEOF(err))
		}
	}
	body := f.body
	f.hn, f.body = 0, nil
	if err := proto.Unmarshal(body, m); err != nil {
		return fmt.Errorf("decode frame: %w", err)
	}
	return nil
}

// noEOF turns an end inside a frame into ErrUnexpectedEOF: only an end
// between frames is clean.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
