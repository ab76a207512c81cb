package frames

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/sdk/wire/rlhostpb"
)

// Conn is the caller's end of one connection of a wire: calls C, answered
// by replies R, run concurrently on it. (CT and RT are what C and R point
// to; they are inferred.)
//
// Replies are read by the callers themselves, not by a goroutine of the
// connection: one waiting caller at a time reads, hands each reply that is
// not its own to its caller, and passes the reading on when it has its
// own. A lone call, the common case, is then woken by the kernel straight
// into its reply, without a hand-off from a reader goroutine (which wakes
// a second thread; BENCHMARKS.md has the cost). With no call waiting,
// nothing reads, so the connection's end is seen by the next call.
type Conn[CT, RT any, C Call[CT], R Reply[RT]] struct {
	conn net.Conn
	what string     // names the wire in errors
	wmu  sync.Mutex // one frame at a time on conn
	fr   frameReader

	mu      sync.Mutex
	next    uint64
	pending map[uint64]*waiter[R]
	reading bool          // a caller is reading replies
	turn    uint64        // counts reading turns, so a late interrupt spares the next
	stopped bool          // a read deadline cut a reader off; the next clears it
	err     error         // why the connection ended; set once
	done    chan struct{} // closed when it ended

	sent func(id uint64) // tests only: runs after a call is sent, before it bids for the turn
}

// waiter is one call waiting for its reply, or for its turn to read.
type waiter[R any] struct {
	reply chan R        // its reply, from the reader
	read  chan struct{} // it is to read next
}

// Dial connects to the socket at path, serving the wire named what.
func Dial[CT, RT any, C Call[CT], R Reply[RT]](ctx context.Context, path, what string) (*Conn[CT, RT, C, R], error) {
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
	return &Conn[CT, RT, C, R]{
		conn: conn, what: what, fr: frameReader{r: bufio.NewReader(conn)},
		pending: map[uint64]*waiter[R]{}, done: make(chan struct{}),
	}
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

// Broken reports whether the connection is known to have ended, so a new
// one is needed.
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
	w := &waiter[R]{reply: make(chan R, 1), read: make(chan struct{}, 1)}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	c.next++
	id := c.next
	c.pending[id] = w
	c.mu.Unlock()
	call.SetId(id)
	if err := c.send(call); err != nil {
		c.giveUp(id, w, false)
		return nil, err
	}
	if c.sent != nil {
		c.sent(id)
	}
	c.mu.Lock()
	// Take the turn if no one reads, unless the reply is in already (read
	// by a caller whose turn has since ended): a turn taken then would be
	// left unused, and no one would read again.
	if _, waiting := c.pending[id]; waiting && !c.reading {
		c.reading = true
		w.read <- struct{}{}
	}
	c.mu.Unlock()
	select {
	case rep := <-w.reply:
		return result(rep)
	case <-w.read:
		rep, err := c.readFor(ctx, id, w)
		if err != nil {
			if err == ctx.Err() {
				c.cancel(id)
			}
			return nil, err
		}
		return result(rep)
	case <-ctx.Done():
		c.giveUp(id, w, false)
		c.cancel(id)
		return nil, ctx.Err()
	case <-c.done:
		select {
		case rep := <-w.reply: // it came before the end
			return result(rep)
		default:
		}
		c.mu.Lock()
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
}

// cancel tells the other side to stop the call id, whose caller gave up.
// Best effort: if the cancel cannot be sent, the connection is broken and
// the other side cancels everything it runs for it.
func (c *Conn[CT, RT, C, R]) cancel(id uint64) {
	m := C(new(CT))
	m.SetId(id)
	m.SetCancel()
	_ = c.send(m)
}

// result is rep's outcome: a reply carrying an error is that error.
func result[RT any, R Reply[RT]](rep R) (R, error) {
	if e := rep.GetError(); e != nil {
		return nil, rlhostpb.FromLentError(e)
	}
	return rep, nil
}

// readFor takes a turn at reading replies, for the call id waiting as w,
// until its reply comes (returned), ctx ends (ctx's error; the reading
// passes to another waiter), or the connection ends (its error).
func (c *Conn[CT, RT, C, R]) readFor(ctx context.Context, id uint64, w *waiter[R]) (R, error) {
	c.mu.Lock()
	c.turn++
	turn := c.turn
	if c.stopped { // an earlier turn's interrupt
		c.stopped = false
		_ = c.conn.SetReadDeadline(time.Time{})
	}
	c.mu.Unlock()
	// A caller that gives up must stop reading, so others can take over:
	// a deadline in the past interrupts the read it is blocked in, and the
	// frame reader keeps any part of a frame for the next reader.
	stop := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.turn == turn && c.reading {
			c.stopped = true
			_ = c.conn.SetReadDeadline(time.Unix(1, 0))
		}
	})
	defer stop()
	for {
		rep := R(new(RT))
		err := c.fr.read(rep)
		if err != nil && ctx.Err() != nil && errors.Is(err, os.ErrDeadlineExceeded) {
			c.giveUp(id, w, true)
			return nil, ctx.Err()
		}
		if err != nil {
			c.fail(err)
			c.mu.Lock()
			defer c.mu.Unlock()
			return nil, c.err
		}
		c.mu.Lock()
		got := rep.GetId()
		o := c.pending[got]
		delete(c.pending, got)
		if got == id {
			c.passTurn()
			c.mu.Unlock()
			return rep, nil
		}
		c.mu.Unlock()
		if o != nil { // nil: the caller gave up already
			o.reply <- rep
		}
	}
}

// passTurn ends a reading turn, giving the next to a waiting call if there
// is one. c.mu is held.
func (c *Conn[CT, RT, C, R]) passTurn() {
	c.turn++
	c.reading = false
	for _, o := range c.pending {
		c.reading = true
		o.read <- struct{}{}
		return
	}
}

// giveUp forgets the call id waiting as w. If it holds the turn to read
// (reading), or was just given it, the turn passes on.
func (c *Conn[CT, RT, C, R]) giveUp(id uint64, w *waiter[R], reading bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pending, id)
	select {
	case <-w.read:
		reading = true
	default:
	}
	if reading {
		c.passTurn()
	}
}

// send writes one frame. A message too large to send fails alone; a failed
// write breaks the connection, since a partial frame leaves it unusable.
func (c *Conn[CT, RT, C, R]) send(call C) error {
	buf, err := Encode(call)
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
