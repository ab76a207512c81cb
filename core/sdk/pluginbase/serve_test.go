package pluginbase

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/health/grpc_health_v1"
)

// tapConn keeps a copy of every byte the client reads and writes.
type tapConn struct {
	net.Conn
	mu      sync.Mutex
	in, out bytes.Buffer
}

func (c *tapConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.in.Write(p[:n])
	c.mu.Unlock()
	return n, err
}

func (c *tapConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.mu.Lock()
	c.out.Write(p[:n])
	c.mu.Unlock()
	return n, err
}

// pings counts the PING frames (acknowledgements left out) in an HTTP/2
// byte stream; a stream cut mid-frame is counted up to the cut.
func pings(t *testing.T, stream []byte) int {
	t.Helper()
	fr := http2.NewFramer(io.Discard, bytes.NewReader(stream))
	n := 0
	for {
		f, err := fr.ReadFrame()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return n
		}
		if err != nil {
			t.Fatalf("parse HTTP/2 frames: %v", err)
		}
		if p, ok := f.(*http2.PingFrame); ok && !p.IsAck() {
			n++
		}
	}
}

// TestNoPingsPerCall checks that host-plugin connections send no
// flow-control pings with their calls: gRPC's bandwidth estimator would
// otherwise answer most messages with a ping the other process has to wake
// up for. The default case shows the test can see those pings.
func TestNoPingsPerCall(t *testing.T) {
	const calls = 20
	for _, tc := range []struct {
		name      string
		server    func() *grpc.Server
		dial      []grpc.DialOption
		wantPings bool
	}{
		{name: "gRPC defaults", server: func() *grpc.Server { return grpc.NewServer() }, wantPings: true},
		{name: "rlhost settings", server: func() *grpc.Server { return NewGRPCServer(nil) }, dial: DialOptions()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "s.sock"))
			if err != nil {
				t.Fatal(err)
			}
			srv := tc.server()
			grpc_health_v1.RegisterHealthServer(srv, health.NewServer())
			go srv.Serve(ln)
			defer srv.Stop()
			tap := &tapConn{}
			conn, err := grpc.NewClient("passthrough:///plugin", append(tc.dial,
				grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
					c, err := (&net.Dialer{}).DialContext(ctx, "unix", ln.Addr().String())
					tap.Conn = c
					return tap, err
				}))...)
			if err != nil {
				t.Fatal(err)
			}
			client := grpc_health_v1.NewHealthClient(conn)
			for i := 0; i < calls; i++ {
				if _, err := client.Check(context.Background(), &grpc_health_v1.HealthCheckRequest{}); err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
			}
			conn.Close()
			tap.mu.Lock()
			defer tap.mu.Unlock()
			out := tap.out.Bytes()
			if !bytes.HasPrefix(out, []byte(http2.ClientPreface)) {
				t.Fatalf("client stream does not start with the HTTP/2 preface")
			}
			sent, received := pings(t, out[len(http2.ClientPreface):]), pings(t, tap.in.Bytes())
			if got := sent+received > 0; got != tc.wantPings {
				t.Errorf("%d calls: client sent %d pings, server sent %d; want pings: %v", calls, sent, received, tc.wantPings)
			}
		})
	}
}
