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

// Client is the plugin's end of one connection to the host's lent-sandbox
// socket, shared by every episode; calls on it run concurrently.
type Client struct {
	conn net.Conn
	wmu  sync.Mutex // one frame at a time on conn

	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan *rlhostpb.LentReply
	err     error         // why the connection ended; set once
	done    chan struct{} // closed when it ended
}

// Dial connects to the host's lent-sandbox socket at path.
func Dial(ctx context.Context, path string) (*Client, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("connect to the lent sandbox socket: %w", err)
	}
	return NewClient(conn), nil
}

// NewClient runs the client on conn until conn ends or Close.
func NewClient(conn net.Conn) *Client {
	c := &Client{conn: conn, pending: map[uint64]chan *rlhostpb.LentReply{}, done: make(chan struct{})}
	go c.read()
	return c
}

// read hands each reply to its waiting call until the connection ends,
// then fails every call still waiting.
func (c *Client) read() {
	r := bufio.NewReader(c.conn)
	var err error
	for {
		rep := &rlhostpb.LentReply{}
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

// fail ends the client with err; the first cause is kept.
func (c *Client) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	// Callers test for ErrUnavailable to tell a broken host connection
	// from a failed call, as they do for gRPC's Unavailable.
	c.err = fmt.Errorf("lent sandbox connection lost: %v: %w", err, core.ErrUnavailable)
	close(c.done)
	c.conn.Close()
}

// Close ends the connection; calls still waiting fail.
func (c *Client) Close() error {
	c.fail(net.ErrClosed)
	return nil
}

// Broken reports whether the connection has ended, so a new one is needed.
func (c *Client) Broken() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Call sends call (its id is set here) and waits for its reply, or for ctx
// to end, which cancels the call on the host. A reply carrying an error is
// returned as that error, converted as FromStatus converts a gRPC status.
func (c *Client) Call(ctx context.Context, call *rlhostpb.LentCall) (*rlhostpb.LentReply, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ch := make(chan *rlhostpb.LentReply, 1)
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
	call.Id = id
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
		// broken and the host cancels everything it runs for it.
		_ = c.send(&rlhostpb.LentCall{Id: id, Call: &rlhostpb.LentCall_Cancel{Cancel: &rlhostpb.Empty{}}})
		return nil, ctx.Err()
	case <-c.done:
		c.mu.Lock()
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
}

func (c *Client) forget(id uint64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

// send writes one frame. A message too large to send fails alone; a failed
// write breaks the connection, since a partial frame leaves it unusable.
func (c *Client) send(call *rlhostpb.LentCall) error {
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
