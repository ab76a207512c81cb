package lendwire

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime/debug"
	"sync"

	"github.com/hashicorp/go-hclog"

	rlhostpb "github.com/rlhost/rlhost/core/proto"
)

// Handler answers one call; the reply's id is set by the server. ctx ends
// when the caller cancels the call or its connection ends.
type Handler func(ctx context.Context, call *rlhostpb.LentCall) *rlhostpb.LentReply

// Serve accepts connections on ln and serves their calls with h until ctx
// ends, then closes ln and every connection. A connection that sends
// something that is not a frame, or reuses the id of a running call, is
// closed and logged; the others go on. Serve returns once every
// connection's reader is gone; calls still running see their context end.
func Serve(ctx context.Context, ln net.Listener, h Handler, log hclog.Logger) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accept lent sandbox connection: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			serveConn(ctx, conn, h, log)
		}()
	}
}

// serveConn reads calls from conn until it ends; each call runs on its own
// goroutine. A connection ended by something other than a clean close is
// logged, before it is closed.
func serveConn(ctx context.Context, conn net.Conn, h Handler, log hclog.Logger) (err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // cuts off the connection's calls still running
	defer context.AfterFunc(ctx, func() { conn.Close() })()
	defer conn.Close()
	defer func() {
		if err != nil {
			log.Error("lent sandbox connection closed", "error", err)
		}
	}()

	var (
		wmu     sync.Mutex
		mu      sync.Mutex
		running = map[uint64]context.CancelFunc{}
	)
	reply := func(rep *rlhostpb.LentReply) {
		buf, err := EncodeFrame(rep)
		if err != nil { // too large: the caller gets an error in its place
			buf, err = EncodeFrame(&rlhostpb.LentReply{Id: rep.GetId(), Result: &rlhostpb.LentReply_Error{Error: rlhostpb.ToLentError(err)}})
			if err != nil {
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
		call := &rlhostpb.LentCall{}
		if err := ReadFrame(r, call); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("bad frame: %w", err)
		}
		id := call.GetId()
		mu.Lock()
		if _, ok := call.GetCall().(*rlhostpb.LentCall_Cancel); ok {
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
			rep := run(cctx, h, call, log)
			mu.Lock()
			delete(running, id)
			mu.Unlock()
			stop()
			rep.Id = id
			reply(rep)
		}()
	}
}

// run calls h; a panic in it fails the call, not the host.
func run(ctx context.Context, h Handler, call *rlhostpb.LentCall, log hclog.Logger) (rep *rlhostpb.LentReply) {
	defer func() {
		if p := recover(); p != nil {
			log.Error("lent sandbox call panicked", "panic", p, "stack", string(debug.Stack()))
			rep = &rlhostpb.LentReply{Result: &rlhostpb.LentReply_Error{Error: rlhostpb.ToLentError(fmt.Errorf("lent sandbox call panicked: %v", p))}}
		}
	}()
	if rep = h(ctx, call); rep == nil {
		rep = &rlhostpb.LentReply{Result: &rlhostpb.LentReply_Error{Error: rlhostpb.ToLentError(errors.New("lent sandbox call gave no reply"))}}
	}
	return rep
}
