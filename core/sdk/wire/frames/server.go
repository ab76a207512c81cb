package frames

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Serve accepts connections on ln and serves their calls with h until ctx
// ends, then closes ln and every connection; what names the wire in logs
// and errors. h answers one call; the reply's id is set here, and h's ctx
// ends when the caller cancels the call or its connection ends. A
// connection that sends something that is not a frame, or reuses the id of
// a running call, is closed and logged; the others go on. An accept that
// fails for want of fds or memory is retried, with backoff; any other
// failure ends ln and every connection, and is returned. Serve returns
// once every connection's reader is gone; calls still running see their
// context end.
func Serve[CT, RT any, C Call[CT], R Reply[RT]](ctx context.Context, ln net.Listener, what string, h func(context.Context, C) R, log hclog.Logger) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(ctx, func() { ln.Close() })()
	var wg sync.WaitGroup
	defer wg.Wait()
	backoff := time.Duration(0)
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if outOfResources(err) {
				// Out of fds or memory for now: the connections being served
				// go on, and accepting resumes once some are freed.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				log.Warn("cannot accept a "+what+" connection; retrying", "error", err, "in", backoff)
				select {
				case <-time.After(backoff):
					continue
				case <-ctx.Done():
					return nil
				}
			}
			// The socket is unusable: it and its connections end now, not
			// when the last peer lets go.
			cancel()
			ln.Close()
			return fmt.Errorf("accept %s connection: %w", what, err)
		}
		backoff = 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			serveConn(ctx, conn, what, h, log)
		}()
	}
}

// serveConn reads calls from conn until it ends; each call runs on its own
// goroutine. A connection ended by something other than the peer hanging
// up (a close or a reset) is logged, before it is closed.
func serveConn[CT, RT any, C Call[CT], R Reply[RT]](ctx context.Context, conn net.Conn, what string, h func(context.Context, C) R, log hclog.Logger) (err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // cuts off the connection's calls still running
	defer context.AfterFunc(ctx, func() { conn.Close() })()
	defer conn.Close()
	defer func() {
		if err != nil {
			log.Error(what+" connection closed", "error", err)
		}
	}()

	var (
		wmu     sync.Mutex
		mu      sync.Mutex
		running = map[uint64]context.CancelFunc{}
	)
	reply := func(rep R) {
		buf, err := Encode(rep)
		if err != nil { // too large: the caller gets an error in its place
			erep := errorReply[RT, R](err)
			erep.SetId(rep.GetId())
			if buf, err = Encode(erep); err != nil {
				conn.Close()
				return
			}
		}
		wmu.Lock()
		defer wmu.Unlock()
		if _, err := conn.Write(buf); err != nil {
			conn.Close() // the reader then ends the connection
		}
	}
	r := bufio.NewReader(conn)
	for {
		call := C(new(CT))
		if err := Read(r, call); err != nil {
			// A reset is a hang-up too: the peer went away with replies
			// it never read, as a plugin being shut down does.
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) || ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("bad frame: %w", err)
		}
		id := call.GetId()
		mu.Lock()
		if call.IsCancel() {
			if stop := running[id]; stop != nil {
				stop()
			}
			mu.Unlock()
			continue
		}
		if running[id] != nil {
			mu.Unlock()
			return fmt.Errorf("call id %d reused while its call runs", id)
		}
		cctx, stop := context.WithCancel(ctx)
		running[id] = stop
		mu.Unlock()
		go func() {
			rep := run(cctx, what, h, call, log)
			mu.Lock()
			delete(running, id)
			mu.Unlock()
			stop()
			rep.SetId(id)
			reply(rep)
		}()
	}
}

// outOfResources is an accept error that passes once fds or memory are
// freed.
func outOfResources(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

// run calls h; a panic in it fails the call, not the process.
func run[CT, RT any, C Call[CT], R Reply[RT]](ctx context.Context, what string, h func(context.Context, C) R, call C, log hclog.Logger) (rep R) {
	defer func() {
		if p := recover(); p != nil {
			log.Error(what+" call panicked", "panic", p, "stack", string(debug.Stack()))
			rep = errorReply[RT, R](fmt.Errorf("%s call panicked: %v", what, p))
		}
	}()
	if rep = h(ctx, call); rep == nil {
		rep = errorReply[RT, R](fmt.Errorf("%s call gave no reply", what))
	}
	return rep
}
