// Command rpcfloor measures the floor under the env hop on this machine:
// round trips between two Go processes over Unix sockets, with nothing but
// the transport in between. The hop (host → env Step, env → host Exec over
// the broker) is a "relay": the parent calls the child, whose handler calls
// back into the parent on a second connection before it answers.
//
// It times, interleaved so drift hits all alike, a raw socket round trip
// and relay, and a gRPC unary round trip and relay both with gRPC's default
// settings and with the ones rlhost uses between host and plugins
// (pluginbase.NewGRPCServer and pluginbase.DialOptions). Each call follows
// an idle gap (-gap), as a Step follows the idle wait on a sandbox exec.
//
//	go run ./scripts/rpcfloor -n 2000 -gap 1ms
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health/grpc_health_v1"

	"github.com/rlhost/rlhost/core/pluginbase"
)

// The two gRPC settings under test, by name.
const (
	defaults = "default"
	rlhost   = "rlhost"
)

func settings() []string { return []string{defaults, rlhost} }

func newServer(setting string) *grpc.Server {
	if setting == rlhost {
		return pluginbase.NewGRPCServer(nil)
	}
	return grpc.NewServer()
}

func dial(setting, sock string) (*grpc.ClientConn, error) {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if setting == rlhost {
		opts = append(opts, pluginbase.DialOptions()...)
	}
	return grpc.NewClient("unix://"+sock, opts...)
}

// relayHealth answers Check at once, or for the service "relay" only after
// one Check of its own on back.
type relayHealth struct {
	grpc_health_v1.UnimplementedHealthServer
	back grpc_health_v1.HealthClient
}

func (h *relayHealth) Check(ctx context.Context, r *grpc_health_v1.HealthCheckRequest) (*grpc_health_v1.HealthCheckResponse, error) {
	if r.GetService() == "relay" {
		if h.back == nil {
			return nil, errors.New("no connection back")
		}
		if _, err := h.back.Check(ctx, &grpc_health_v1.HealthCheckRequest{}); err != nil {
			return nil, fmt.Errorf("call back: %w", err)
		}
	}
	return &grpc_health_v1.HealthCheckResponse{Status: grpc_health_v1.HealthCheckResponse_SERVING}, nil
}

// serveGRPC serves h on a new socket in dir under name.
func serveGRPC(dir, name, setting string, h *relayHealth) error {
	ln, err := net.Listen("unix", filepath.Join(dir, name))
	if err != nil {
		return err
	}
	s := newServer(setting)
	grpc_health_v1.RegisterHealthServer(s, h)
	go s.Serve(ln)
	return nil
}

// serveRaw echoes every read; with relay set, a read starting with 'r' is
// first sent on relay and its answer awaited.
func serveRaw(ln net.Listener, relay net.Conn) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			b := make([]byte, 64)
			for {
				n, err := c.Read(b)
				if err != nil {
					return
				}
				if relay != nil && b[0] == 'r' {
					if _, err := relay.Write(b[:n]); err != nil {
						return
					}
					if _, err := io.ReadFull(relay, b[:n]); err != nil {
						return
					}
				}
				if _, err := c.Write(b[:n]); err != nil {
					return
				}
			}
		}()
	}
}

// child runs the callee: the parent's servers are up before it starts.
func child(dir string) error {
	back, err := net.Dial("unix", filepath.Join(dir, "parent-raw.sock"))
	if err != nil {
		return err
	}
	ln, err := net.Listen("unix", filepath.Join(dir, "child-raw.sock"))
	if err != nil {
		return err
	}
	go serveRaw(ln, back)
	for _, s := range settings() {
		conn, err := dial(s, filepath.Join(dir, "parent-"+s+".sock"))
		if err != nil {
			return err
		}
		if err := serveGRPC(dir, "child-"+s+".sock", s, &relayHealth{back: grpc_health_v1.NewHealthClient(conn)}); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "ready"), nil, 0o644); err != nil {
		return err
	}
	select {} // the parent kills us
}

func median(xs []time.Duration) time.Duration {
	s := append([]time.Duration(nil), xs...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func run(n int, gap time.Duration) error {
	dir, err := os.MkdirTemp("", "rpcfloor")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	pln, err := net.Listen("unix", filepath.Join(dir, "parent-raw.sock"))
	if err != nil {
		return err
	}
	go serveRaw(pln, nil)
	for _, s := range settings() {
		if err := serveGRPC(dir, "parent-"+s+".sock", s, &relayHealth{}); err != nil {
			return err
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, "-child", dir)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("child did not start")
		}
	}
	raw, err := net.Dial("unix", filepath.Join(dir, "child-raw.sock"))
	if err != nil {
		return err
	}
	type op struct {
		name string
		call func() error
	}
	buf := make([]byte, 8)
	rawCall := func(kind byte) func() error {
		return func() error {
			buf[0] = kind
			if _, err := raw.Write(buf); err != nil {
				return err
			}
			_, err := io.ReadFull(raw, buf)
			return err
		}
	}
	ops := []op{{"raw round trip", rawCall('e')}, {"raw relay (2 round trips)", rawCall('r')}}
	ctx := context.Background()
	for _, s := range settings() {
		conn, err := dial(s, filepath.Join(dir, "child-"+s+".sock"))
		if err != nil {
			return err
		}
		defer conn.Close()
		hc := grpc_health_v1.NewHealthClient(conn)
		for _, svc := range []string{"", "relay"} {
			req := &grpc_health_v1.HealthCheckRequest{Service: svc}
			name := "gRPC unary round trip, " + s + " settings"
			if svc == "relay" {
				name = "gRPC relay (2 round trips), " + s + " settings"
			}
			ops = append(ops, op{name, func() error { _, err := hc.Check(ctx, req); return err }})
		}
	}
	times := make([][]time.Duration, len(ops))
	for i := -10; i < n; i++ { // the first ten warm up
		for j, o := range ops {
			time.Sleep(gap)
			t0 := time.Now()
			if err := o.call(); err != nil {
				return fmt.Errorf("%s: %w", o.name, err)
			}
			if i >= 0 {
				times[j] = append(times[j], time.Since(t0))
			}
		}
	}
	fmt.Printf("%d calls each, idle gap %v before each\n", n, gap)
	for j, o := range ops {
		fmt.Printf("  %-45s p50 %7.1f µs\n", o.name, float64(median(times[j]).Nanoseconds())/1e3)
	}
	return nil
}

func main() {
	n := flag.Int("n", 2000, "calls of each kind")
	gap := flag.Duration("gap", time.Millisecond, "idle time before each call")
	childDir := flag.String("child", "", "internal: run as the callee, serving in this directory")
	flag.Parse()
	var err error
	if *childDir != "" {
		err = child(*childDir)
	} else {
		err = run(*n, *gap)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rpcfloor:", err)
		os.Exit(1)
	}
}
