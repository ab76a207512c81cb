package lendwire

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"sync"

	"github.com/rlhost/rlhost/core"
	rlhostpb "github.com/rlhost/rlhost/core/proto"
)

// Conn is the caller's end of one connection of a wire: calls C, answered
// by replies R, run concurrently on it. (CT and RT are what C and R point
// to; they are inferred.)
type Conn[CT, RT any, C Call[CT], R Reply[RT]] struct {
	conn net.Conn
	what string     // names the wire in errors
	wmu  sync.Mutex // one frame at a time on conn

	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan R
	err     error         // why the connection ended; set once
	done    chan struct{} // closed when it ended
}

// Client is the plugin's end of one connection to the host's lent-sandbox
// socket, shared by every episode.
type Client = Conn[rlhostpb.LentCall, rlhostpb.LentReply, *rlhostpb.LentCall, *rlhostpb.LentReply]

// Dial connects to the host's lent-sandbox socket at path.
func Dial(ctx context.Context, path string) (*Client, error) {
	return DialConn[rlhostpb.LentCall, rlhostpb.LentReply](ctx, path, "lent sandbox")
}

// NewClient runs a lent-sandbox client on conn until conn ends or Close.
func NewClient(conn net.Conn) *Client {
	return NewConn[rlhostpb.LentCall, rlhostpb.LentReply](conn, "lent sandbox")
}

// DialConn connects to the socket at path, serving the wire named what.
func DialConn[CT, RT any, C Call[CT], R Reply[RT]](ctx context.Context, path, what string) (*Conn[CT, RT, C, R], error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("connect to the %s socket: %w", what, err)
	}
	return NewConn[CT, RT, C, R](conn, what), nil
}

// NewConn runs the caller's end of the wire named what on conn, until conn
// ends or Close.
func NewConn[CT, RT any, C Call[CT], R Reply[RT]](conn net.Conn, what string) *Conn[CT, RT, C, R] {
	c := &Conn[CT, RT, C, R]{conn: conn, what: what, pending: map[uint64]chan R{}, done: make(chan struct{})}
	go c.read()
	return c
}

// read hands each reply to its waiting call until the connection ends,
// then fails every call still waiting.
func (c *Conn[CT, RT, C, R]) read() {
	r := bufio.NewReader(c.conn)
	var err error
	for {
		rep := R(new(RT))
		if err = ReadFrame(r, rep); err != nil {
			break
		}
		c.mu.Lock()
		ch := c.pending[rep.GetId()]
		delete(c.pending, rep.GetId())
		c.mu.Unlock()
		if ch != nil { // nil: the caller gave up already
			ch <- rep
		}
	}
	c.fail(err)
}

// fail ends the connection with err; the first cause is kept.
func (c *Conn[CT, RT, C, R]) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	// Callers test for ErrUnavailable to tell a broken connection (a peer
	// that died) from a failed call, as they do for gRPC's Unavailable.
	c.err = fmt.Errorf("%s connection lost: %v: %w", c.what, err, core.ErrUnavailable)
	close(c.done)
	c.conn.Close()
}

// Close ends the connection; calls still waiting fail.
func (c *Conn[CT, RT, C, R]) Close() error {
	c.fail(net.ErrClosed)
	return nil
}

// Broken reports whether the connection has ended, so a new one is needed.
func (c *Conn[CT, RT, C, R]) Broken() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Call sends call (its id is set here) and waits for its reply, or for ctx
// to end, which cancels the call on the other side. A reply carrying an
// error is returned as that error, converted as FromStatus converts a gRPC
// status.
func (c *Conn[CT, RT, C, R]) Call(ctx context.Context, call C) (R, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ch := make(chan R, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	c.next++
	id := c.next
	c.pending[id] = ch
	c.mu.Unlock()
	call.SetId(id)
	if err := c.send(call); err != nil {
		c.forget(id)
		return nil, err
	}
	select {
	case rep := <-ch:
		if e := rep.GetError(); e != nil {
			return nil, rlhostpb.FromLentError(e)
		}
		return rep, nil
	case <-ctx.Done():
		c.forget(id)
		// Best effort: if the cancel cannot be sent, the connection is
		// broken and the other side cancels everything it runs for it.
		cancel := C(new(CT))
		cancel.SetId(id)
		cancel.SetCancel()
		_ = c.send(cancel)
		return nil, ctx.Err()
	case <-c.done:
		c.mu.Lock()
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
}

func (c *Conn[CT, RT, C, R]) forget(id uint64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

// send writes one frame. A message too large to send fails alone; a failed
// write breaks the connection, since a partial frame leaves it unusable.
func (c *Conn[CT, RT, C, R]) send(call C) error {
	buf, err := EncodeFrame(call)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	_, err = c.conn.Write(buf)
	c.wmu.Unlock()
	if err != nil {
		c.fail(err)
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.err
	}
	return nil
}
