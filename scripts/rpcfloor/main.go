// Command rpcfloor measures the floor under the env hop on this machine:
// round trips between two Go processes over Unix sockets, with nothing but
// the transport in between. The hop (host → env Step, env → host Exec over
// the broker) is a "relay": the parent calls the child, whose handler calls
// back into the parent on a second connection before it answers.
//
// It times, interleaved (in a new order each round) so drift and what each
// call follows hit all alike, a raw socket round trip
// and relay; the same on rlhost's framed wire (core/sdk/wire/frames, which carries
// the hop's Step and lent-sandbox calls); and a gRPC unary round trip and
// relay both with gRPC's default settings and with the ones rlhost uses
// between host and plugins (pluginbase.NewGRPCServer and
// pluginbase.DialOptions). Each call follows
// an idle gap (-gap), as a Step follows the idle wait on a sandbox exec.
//
// With -hop it times the hop's whole shape instead, with rlhost's settings
// and three processes: a host, an env and a backend whose one call runs
// `true`. Direct is host → backend; via env is host → env → host → backend;
// hop is their difference, as BenchmarkPluginRoundTrip reports it.
//
//	go run ./scripts/rpcfloor -n 2000 -gap 1ms
//	go run ./scripts/rpcfloor -n 1000 -gap 1ms -md   # as make bench runs it
//	go run ./scripts/rpcfloor -hop -n 300
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health/grpc_health_v1"

	"github.com/hashicorp/go-hclog"

	"github.com/rlhost/rlhost/core/sdk/pluginbase"
	"github.com/rlhost/rlhost/core/sdk/wire/frames"
	"github.com/rlhost/rlhost/core/sdk/wire/lend"
	"github.com/rlhost/rlhost/core/sdk/wire/rlhostpb"
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

// hopHealth plays one part of the hop: service "exec" runs true (the
// backend), "forward" calls "exec" on back (the host's lent sandbox),
// "step" calls "forward" on back (the env's Step); anything else answers
// at once (a no-op Step).
type hopHealth struct {
	grpc_health_v1.UnimplementedHealthServer
	back     grpc_health_v1.HealthClient
	truePath string
}

func (h *hopHealth) Check(ctx context.Context, r *grpc_health_v1.HealthCheckRequest) (*grpc_health_v1.HealthCheckResponse, error) {
	next := map[string]string{"forward": "exec", "step": "forward"}[r.GetService()]
	switch {
	case r.GetService() == "exec":
		if err := exec.CommandContext(ctx, h.truePath).Run(); err != nil {
			return nil, fmt.Errorf("run true: %w", err)
		}
	case next != "" && h.back == nil:
		return nil, errors.New("no connection onward")
	case next != "":
		if _, err := h.back.Check(ctx, &grpc_health_v1.HealthCheckRequest{Service: next}); err != nil {
			return nil, fmt.Errorf("call %s: %w", next, err)
		}
	}
	return &grpc_health_v1.HealthCheckResponse{Status: grpc_health_v1.HealthCheckResponse_SERVING}, nil
}

// serveGRPC serves h on a new socket in dir under name.
func serveGRPC(dir, name, setting string, h grpc_health_v1.HealthServer) error {
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

// serveFrames answers calls on rlhost's framed wire at once or, for the
// call naming "relay", after one call of its own on back.
func serveFrames(ln net.Listener, back *lend.Conn) {
	h := func(ctx context.Context, c *rlhostpb.LentCall) *rlhostpb.LentReply {
		if c.GetInfo().GetId() == "relay" {
			if _, err := back.Call(ctx, frameCall("x")); err != nil {
				return &rlhostpb.LentReply{Result: &rlhostpb.LentReply_Error{Error: rlhostpb.ToLentError(err)}}
			}
		}
		return &rlhostpb.LentReply{Result: &rlhostpb.LentReply_Info{Info: &rlhostpb.SandboxInfo{Id: c.GetInfo().GetId()}}}
	}
	go frames.Serve(context.Background(), ln, "rpcfloor", h, hclog.NewNullLogger())
}

func frameCall(id string) *rlhostpb.LentCall {
	return &rlhostpb.LentCall{Call: &rlhostpb.LentCall_Info{Info: &rlhostpb.SandboxID{Id: id}}}
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
	fback, err := lend.Dial(context.Background(), filepath.Join(dir, "parent-frames.sock"))
	if err != nil {
		return err
	}
	fln, err := net.Listen("unix", filepath.Join(dir, "child-frames.sock"))
	if err != nil {
		return err
	}
	serveFrames(fln, fback)
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

// hopChild serves one part of the hop: the backend, or the env calling
// back into the host.
func hopChild(dir, role string) error {
	h := &hopHealth{}
	switch role {
	case "backend":
		p, err := exec.LookPath("true")
		if err != nil {
			return err
		}
		h.truePath = p
	case "env":
		conn, err := dial(rlhost, filepath.Join(dir, "host.sock"))
		if err != nil {
			return err
		}
		h.back = grpc_health_v1.NewHealthClient(conn)
	default:
		return fmt.Errorf("unknown role %q", role)
	}
	if err := serveGRPC(dir, role+".sock", rlhost, h); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, role+".ready"), nil, 0o644); err != nil {
		return err
	}
	select {} // the parent kills us
}

// startChild starts this program as a child in role and waits until it
// has written dir/<ready>.
func startChild(dir, role, ready string) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "-child", dir, "-role", role)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(dir, ready)); err == nil {
			return cmd, nil
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			return nil, fmt.Errorf("%s child did not start", role)
		}
	}
}

func stop(cmd *exec.Cmd) {
	cmd.Process.Kill()
	cmd.Wait()
}

// runHop times the hop's shape, in interleaved rounds like the benchmark.
func runHop(n int) error {
	dir, err := os.MkdirTemp("", "rpcfloor")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	be, err := startChild(dir, "backend", "backend.ready")
	if err != nil {
		return err
	}
	defer stop(be)
	bconn, err := dial(rlhost, filepath.Join(dir, "backend.sock"))
	if err != nil {
		return err
	}
	defer bconn.Close()
	backend := grpc_health_v1.NewHealthClient(bconn)
	if err := serveGRPC(dir, "host.sock", rlhost, &hopHealth{back: backend}); err != nil {
		return err
	}
	en, err := startChild(dir, "env", "env.ready")
	if err != nil {
		return err
	}
	defer stop(en)
	econn, err := dial(rlhost, filepath.Join(dir, "env.sock"))
	if err != nil {
		return err
	}
	defer econn.Close()
	env := grpc_health_v1.NewHealthClient(econn)
	truePath, err := exec.LookPath("true")
	if err != nil {
		return err
	}
	ctx := context.Background()
	check := func(c grpc_health_v1.HealthClient, svc string) error {
		_, err := c.Check(ctx, &grpc_health_v1.HealthCheckRequest{Service: svc})
		return err
	}
	steps := []func() error{
		func() error { return exec.Command(truePath).Run() },
		func() error { return check(backend, "exec") },
		func() error { return check(env, "step") },
		func() error { return check(env, "") },
	}
	times := make([][]time.Duration, len(steps))
	for i := -10; i < n; i++ { // the first ten warm up
		for j, step := range steps {
			t0 := time.Now()
			if err := step(); err != nil {
				return err
			}
			if i >= 0 {
				times[j] = append(times[j], time.Since(t0))
			}
		}
	}
	bare, direct, via, noop := median(times[0]), median(times[1]), median(times[2]), median(times[3])
	fmt.Printf("%d rounds, rlhost settings, p50 µs: bare fork/exec %.0f, direct %.0f, via env %.0f, hop %.0f, no-op call %.0f\n",
		n, micros(bare), micros(direct), micros(via), micros(via-direct), micros(noop))
	return nil
}

// micros is d in µs.
func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

func median(xs []time.Duration) time.Duration {
	s := append([]time.Duration(nil), xs...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func run(n int, gap time.Duration, md bool) error {
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
	fln, err := net.Listen("unix", filepath.Join(dir, "parent-frames.sock"))
	if err != nil {
		return err
	}
	serveFrames(fln, nil)
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
	fc, err := lend.Dial(ctx, filepath.Join(dir, "child-frames.sock"))
	if err != nil {
		return err
	}
	defer fc.Close()
	framesCall := func(id string) func() error {
		return func() error { _, err := fc.Call(ctx, frameCall(id)); return err }
	}
	ops = append(ops, op{"frames round trip", framesCall("echo")}, op{"frames relay (2 round trips)", framesCall("relay")})
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
	// Each round takes the ops in a new order: in a fixed one, what an op
	// follows shifts its figure (by 50 µs for the framed round trip after
	// the raw relay, on a 2-core VM), always in its disfavour or favour.
	rng := rand.New(rand.NewPCG(1, 2))
	order := make([]int, len(ops))
	for j := range order {
		order[j] = j
	}
	for i := -10; i < n; i++ { // the first ten warm up
		rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		for _, j := range order {
			o := ops[j]
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
		fmt.Printf("  %-45s p50 %7.1f µs\n", o.name, micros(median(times[j])))
	}
	if md {
		// Rows for BENCHMARKS.md; each against the raw socket in the same
		// shape (ops come in pairs: a round trip, then a relay).
		for j, o := range ops {
			base := median(times[j%2])
			fmt.Printf("| %s | %d | %v | %.1f | %.2fx |\n", o.name, n, gap, micros(median(times[j])), float64(median(times[j]))/float64(base))
		}
	}
	return nil
}

func main() {
	n := flag.Int("n", 2000, "calls of each kind")
	gap := flag.Duration("gap", time.Millisecond, "idle time before each call")
	hop := flag.Bool("hop", false, "time the hop's shape with three processes instead")
	md := flag.Bool("md", false, "also print the figures as Markdown table rows")
	childDir := flag.String("child", "", "internal: run as a callee, serving in this directory")
	role := flag.String("role", "", "internal: the callee's part in -hop")
	flag.Parse()
	var err error
	switch {
	case *childDir != "" && *role != "":
		err = hopChild(*childDir, *role)
	case *childDir != "":
		err = child(*childDir)
	case *hop:
		err = runHop(*n)
	default:
		err = run(*n, *gap, *md)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rpcfloor:", err)
		os.Exit(1)
	}
}
