// Package fakeaviato is an in-process, wire-level fake of Aviato's
// ATCService (coreweave.aviato.v1beta1, as CoreWeave Sandbox was called in
// cwsandbox-client v0.16.0), for tests that drive the rlhost aviato backend,
// or the official client's generated modules, without a cloud account.
//
// It is a real gRPC server built from the definitions recovered from the
// client's descriptors (plugins/aviato/proto). Its sandboxes are real local
// sandboxes of rlhost's local backend (Linux namespaces, with /workspace as
// their writable workspace): commands run as local processes, files are
// kept per sandbox. It is not an isolation boundary, and container_image is
// recorded but not pulled: every sandbox sees the host's programs.
//
// What the client (v0.16.0: _sandbox.py, _auth.py, _defaults.py,
// _network.py) fixes, and the fake therefore does:
//   - Auth is gRPC metadata "authorization: Bearer <key>" (the client reads
//     CWSANDBOX_API_KEY; aviato-client read AVIATO_API_KEY). A missing or
//     wrong key is UNAUTHENTICATED, which the client reports as an
//     authentication error. W&B credentials went as x-api-key, x-entity-id
//     and x-project-name in older clients; the fake accepts those when
//     Options.WandbKey is set.
//   - Start answers at once with the id and SANDBOX_STATUS_PENDING; the
//     client then polls Get (0.2 s, x1.5, at most 2 s) until a stable state:
//     RUNNING, PAUSED, COMPLETED, FAILED, TERMINATED or UNSPECIFIED.
//     PENDING and CREATING are transient.
//   - Tags are plain strings; List filters by tags, status and
//     include_stopped. Resources go in resource_limits as Kubernetes
//     quantities ("500m", "512Mi"); max_lifetime_seconds bounds a sandbox's
//     life; environment_variables reach every process.
//   - Stop and Delete answer {success, error_message}; NOT_FOUND means the
//     sandbox is unknown. AddFile and RetrieveFile report file-level
//     failures in {success, error_message}, not as a status.
//   - NOT_FOUND, CANCELLED, DEADLINE_EXCEEDED, UNAVAILABLE, UNAUTHENTICATED
//     and PERMISSION_DENIED are the codes the client tells apart; it retries
//     nothing itself.
//
// What the client leaves open, and how the fake chooses (the live service
// may differ):
//   - Unary Exec: the client execs through ATCStreamingService.StreamExec,
//     which the fake does not serve. The fake runs command followed by args
//     as one argv, kills it after max_timeout_seconds and answers
//     DEADLINE_EXCEEDED, and answers FAILED_PRECONDITION when the sandbox is
//     not RUNNING.
//   - Whether List's tags match all or any: the fake requires all.
//   - Quota: past Options.MaxSandboxes live sandboxes Start answers
//     RESOURCE_EXHAUSTED.
//   - A lifetime that ends makes the sandbox TERMINATED; stopped sandboxes
//     stay visible to Get and to List with include_stopped until deleted.
//   - AddFile creates missing parent directories; paths outside /workspace
//     fail with success = false (a local sandbox writes only there).
package fakeaviato

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
	pb "github.com/rlhost/rlhost/plugins/aviato/aviatopb"
	"github.com/rlhost/rlhost/plugins/fakelatency"
	"github.com/rlhost/rlhost/plugins/local"
)

// DefaultAPIKey is the bearer token a Server accepts when Options.APIKey is
// empty.
const DefaultAPIKey = "fake-aviato-key"

// Options configure a Server. The zero value is usable.
type Options struct {
	APIKey string // the one bearer token accepted; DefaultAPIKey when empty
	// WandbKey and WandbEntity, when set, are also accepted as x-api-key
	// and x-entity-id metadata.
	WandbKey, WandbEntity string
	// StartPolls is how many Gets a new sandbox answers PENDING, then
	// CREATING, before RUNNING, so clients exercise their polling.
	StartPolls int
	// MaxSandboxes caps live sandboxes; 0 means no cap.
	MaxSandboxes int
	// Helper is the local backend's sandbox init binary ("" = its default:
	// rlhost-sandbox-init beside the executable, else the executable).
	Helper string
	// StateDir is where the local backend records its sandboxes; a
	// temporary directory when empty.
	StateDir string
	// Latency makes calls take as long as the real service's: a new
	// sandbox is not RUNNING before a Create latency has passed, Exec
	// waits an Exec latency before its command starts, and AddFile and
	// RetrieveFile a Files latency.
	Latency fakelatency.Model
}

// Sandbox is what a test can see of one sandbox.
type Sandbox struct {
	ID          string
	Status      pb.SandboxStatus
	Tags        []string
	Image       string
	Env         map[string]string
	CPU, Memory string // resource_limits as sent
	MaxLifetime int32
}

type box struct {
	Sandbox
	started time.Time
	localID string
	ready   chan struct{} // closed when the local sandbox exists (or failed)
	polls   int
	readyAt time.Time // not RUNNING before (Options.Latency.Create)
	timer   *time.Timer
}

// Server is a running fake ATCService.
type Server struct {
	pb.UnimplementedATCServiceServer
	// Addr is host:port; URL is the http:// base URL clients are given.
	Addr, URL string

	opts    Options
	lat     *fakelatency.Source
	grpc    *grpc.Server
	lis     net.Listener
	local   *local.Backend
	tmpDir  string
	mu      sync.Mutex
	boxes   map[string]*box
	seq     int
	starts  int
	methods []string
}

// New starts a Server on a free loopback port.
func New(opts Options) (*Server, error) {
	if opts.APIKey == "" {
		opts.APIKey = DefaultAPIKey
	}
	s := &Server{opts: opts, boxes: map[string]*box{}, lat: fakelatency.NewSource(opts.Latency.Seed)}
	if opts.StateDir == "" {
		d, err := os.MkdirTemp("", "fakeaviato-")
		if err != nil {
			return nil, fmt.Errorf("fakeaviato: state dir: %w", err)
		}
		s.tmpDir, opts.StateDir = d, d
	}
	cfg, _ := json.Marshal(map[string]any{"state_dir": opts.StateDir, "helper": opts.Helper, "max_sandboxes": 0})
	s.local = local.New()
	if d := s.local.Configure(context.Background(), schema.Config{Name: "fakeaviato", JSON: cfg}, core.SandboxSpec{}); d.HasErrors() {
		s.cleanupDir()
		return nil, fmt.Errorf("fakeaviato: local sandboxes: %w", d.Err())
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.cleanupDir()
		return nil, fmt.Errorf("fakeaviato: listen: %w", err)
	}
	s.lis, s.Addr, s.URL = lis, lis.Addr().String(), "http://"+lis.Addr().String()
	s.grpc = grpc.NewServer(grpc.UnaryInterceptor(s.auth), grpc.MaxRecvMsgSize(100<<20), grpc.MaxSendMsgSize(100<<20))
	pb.RegisterATCServiceServer(s.grpc, s)
	go s.grpc.Serve(lis)
	return s, nil
}

func (s *Server) cleanupDir() {
	if s.tmpDir != "" {
		os.RemoveAll(s.tmpDir)
	}
}

// Close stops serving and destroys every sandbox.
func (s *Server) Close() {
	s.grpc.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = s.local.Shutdown(ctx)
	s.cleanupDir()
}

// auth checks the credentials of every call, as the service's gateway does.
func (s *Server) auth(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	ok := false
	for _, v := range md.Get("authorization") {
		if v == "Bearer "+s.opts.APIKey {
			ok = true
		}
	}
	if s.opts.WandbKey != "" && first(md, "x-api-key") == s.opts.WandbKey && first(md, "x-entity-id") == s.opts.WandbEntity {
		ok = true
	}
	s.mu.Lock()
	s.methods = append(s.methods, info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:])
	s.mu.Unlock()
	if !ok {
		return nil, status.Error(codes.Unauthenticated, "invalid or missing API key")
	}
	return h(ctx, req)
}

func first(md metadata.MD, k string) string {
	if v := md.Get(k); len(v) > 0 {
		return v[0]
	}
	return ""
}

// Sandboxes returns the sandboxes not yet stopped or deleted, by id.
func (s *Server) Sandboxes() []Sandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Sandbox
	for _, b := range s.boxes {
		if !terminal(b.Status) {
			out = append(out, b.copy())
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Starts counts accepted Start calls.
func (s *Server) Starts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.starts
}

// Calls returns the method names called so far, in order, failed ones too.
func (s *Server) Calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.methods...)
}

func (b *box) copy() Sandbox {
	c := b.Sandbox
	c.Tags = append([]string(nil), b.Tags...)
	return c
}

func terminal(st pb.SandboxStatus) bool {
	switch st {
	case pb.SandboxStatus_SANDBOX_STATUS_COMPLETED, pb.SandboxStatus_SANDBOX_STATUS_FAILED, pb.SandboxStatus_SANDBOX_STATUS_TERMINATED:
		return true
	}
	return false
}

// quantity is a Kubernetes resource quantity: a decimal with an optional
// SI or binary suffix.
var quantity = regexp.MustCompile(`^([0-9]+(\.[0-9]+)?|\.[0-9]+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$`)

// Start validates the request, records the sandbox as PENDING and starts a
// local sandbox for it in the background.
func (s *Server) Start(ctx context.Context, r *pb.StartSandboxRequest) (*pb.StartSandboxResponse, error) {
	if r.GetContainerImage() == "" {
		return nil, status.Error(codes.InvalidArgument, "container_image is required")
	}
	for _, rr := range []*pb.ResourceRequest{r.GetResourceLimits(), r.GetResourceRequests(), r.GetResources()} {
		for name, v := range map[string]string{"cpu": rr.GetCpu(), "memory": rr.GetMemory()} {
			if v != "" && !quantity.MatchString(v) {
				return nil, status.Errorf(codes.InvalidArgument, "invalid %s quantity %q", name, v)
			}
		}
	}
	if r.GetMaxLifetimeSeconds() < 0 {
		return nil, status.Error(codes.InvalidArgument, "max_lifetime_seconds must not be negative")
	}
	s.mu.Lock()
	live := 0
	for _, b := range s.boxes {
		if !terminal(b.Status) {
			live++
		}
	}
	if s.opts.MaxSandboxes > 0 && live >= s.opts.MaxSandboxes {
		s.mu.Unlock()
		return nil, status.Errorf(codes.ResourceExhausted, "sandbox quota of %d reached", s.opts.MaxSandboxes)
	}
	s.seq++
	s.starts++
	b := &box{
		Sandbox: Sandbox{
			ID: fmt.Sprintf("sb-%06d", s.seq), Status: pb.SandboxStatus_SANDBOX_STATUS_PENDING,
			Tags: append([]string(nil), r.GetTags()...), Image: r.GetContainerImage(), Env: r.GetEnvironmentVariables(),
			CPU: r.GetResourceLimits().GetCpu(), Memory: r.GetResourceLimits().GetMemory(), MaxLifetime: r.GetMaxLifetimeSeconds(),
		},
		started: time.Now(), ready: make(chan struct{}),
	}
	b.readyAt = b.started.Add(s.lat.Draw(s.opts.Latency.Create))
	s.boxes[b.ID] = b
	if lt := r.GetMaxLifetimeSeconds(); lt > 0 {
		id := b.ID
		b.timer = time.AfterFunc(time.Duration(lt)*time.Second, func() { s.end(id, pb.SandboxStatus_SANDBOX_STATUS_TERMINATED) })
	}
	s.mu.Unlock()
	go s.provision(b.ID, r.GetEnvironmentVariables())
	return &pb.StartSandboxResponse{
		SandboxId: b.ID, StartedAtTime: timestamppb.New(b.started), SandboxStatus: b.Status,
		RequestedResourceLimits: r.GetResourceLimits(), RequestedResourceRequests: r.GetResourceRequests(),
	}, nil
}

// provision makes the local sandbox behind id; a failure marks it FAILED.
func (s *Server) provision(id string, env map[string]string) {
	info, err := s.local.Create(context.Background(), core.SandboxSpec{Env: env})
	s.mu.Lock()
	b := s.boxes[id]
	if b == nil || terminal(b.Status) {
		s.mu.Unlock()
		if err == nil {
			_ = s.local.Destroy(context.Background(), info.ID)
		}
		if b != nil {
			close(b.ready)
		}
		return
	}
	if err != nil {
		b.Status = pb.SandboxStatus_SANDBOX_STATUS_FAILED
	} else {
		b.localID = info.ID
	}
	close(b.ready)
	s.mu.Unlock()
}

// end moves a sandbox to a terminal state and destroys its local sandbox.
func (s *Server) end(id string, st pb.SandboxStatus) bool {
	s.mu.Lock()
	b := s.boxes[id]
	if b == nil {
		s.mu.Unlock()
		return false
	}
	if !terminal(b.Status) {
		b.Status = st
	}
	if b.timer != nil {
		b.timer.Stop()
	}
	lid := b.localID
	b.localID = ""
	s.mu.Unlock()
	if lid != "" {
		_ = s.local.Destroy(context.Background(), lid)
	}
	return true
}

// Get reports the status, advancing a new sandbox through PENDING and
// CREATING to RUNNING once its local sandbox exists.
func (s *Server) Get(ctx context.Context, r *pb.GetSandboxRequest) (*pb.GetSandboxResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.boxes[r.GetSandboxId()]
	if b == nil {
		return nil, status.Errorf(codes.NotFound, "sandbox %s not found", r.GetSandboxId())
	}
	s.advanceLocked(b)
	return &pb.GetSandboxResponse{SandboxId: b.ID, StartedAtTime: timestamppb.New(b.started), SandboxStatus: b.Status}, nil
}

func (s *Server) advanceLocked(b *box) {
	if terminal(b.Status) || b.Status == pb.SandboxStatus_SANDBOX_STATUS_RUNNING {
		return
	}
	b.polls++
	if b.polls > s.opts.StartPolls/2 {
		b.Status = pb.SandboxStatus_SANDBOX_STATUS_CREATING
	}
	select {
	case <-b.ready:
		if b.localID != "" && b.polls > s.opts.StartPolls && !time.Now().Before(b.readyAt) {
			b.Status = pb.SandboxStatus_SANDBOX_STATUS_RUNNING
		}
	default:
	}
}

// List returns sandboxes carrying all the requested tags.
func (s *Server) List(ctx context.Context, r *pb.ListSandboxesRequest) (*pb.ListSandboxesResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := &pb.ListSandboxesResponse{}
	ids := make([]string, 0, len(s.boxes))
	for id := range s.boxes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		b := s.boxes[id]
		if terminal(b.Status) && !r.GetIncludeStopped() {
			continue
		}
		if r.GetStatus() != pb.SandboxStatus_SANDBOX_STATUS_UNSPECIFIED && r.GetStatus() != b.Status {
			continue
		}
		if !hasAll(b.Tags, r.GetTags()) {
			continue
		}
		resp.Sandboxes = append(resp.Sandboxes, &pb.SandboxInfo{SandboxId: b.ID, StartedAtTime: timestamppb.New(b.started), SandboxStatus: b.Status})
	}
	return resp, nil
}

func hasAll(have, want []string) bool {
	set := map[string]bool{}
	for _, t := range have {
		set[t] = true
	}
	for _, t := range want {
		if !set[t] {
			return false
		}
	}
	return true
}

// Stop ends a sandbox; it stays visible as TERMINATED until deleted.
func (s *Server) Stop(ctx context.Context, r *pb.StopSandboxRequest) (*pb.StopSandboxResponse, error) {
	if !s.end(r.GetSandboxId(), pb.SandboxStatus_SANDBOX_STATUS_TERMINATED) {
		return nil, status.Errorf(codes.NotFound, "sandbox %s not found", r.GetSandboxId())
	}
	return &pb.StopSandboxResponse{Success: true}, nil
}

// Delete ends a sandbox and forgets it.
func (s *Server) Delete(ctx context.Context, r *pb.DeleteSandboxRequest) (*pb.DeleteSandboxResponse, error) {
	if !s.end(r.GetSandboxId(), pb.SandboxStatus_SANDBOX_STATUS_TERMINATED) {
		return nil, status.Errorf(codes.NotFound, "sandbox %s not found", r.GetSandboxId())
	}
	s.mu.Lock()
	delete(s.boxes, r.GetSandboxId())
	s.mu.Unlock()
	return &pb.DeleteSandboxResponse{Success: true}, nil
}

// running returns the local sandbox of a RUNNING sandbox.
func (s *Server) running(id string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.boxes[id]
	if b == nil {
		return "", status.Errorf(codes.NotFound, "sandbox %s not found", id)
	}
	s.advanceLocked(b)
	if b.Status != pb.SandboxStatus_SANDBOX_STATUS_RUNNING || b.localID == "" {
		return "", status.Errorf(codes.FailedPrecondition, "sandbox %s is %s, not running", id, b.Status)
	}
	return b.localID, nil
}

// Exec runs command+args to completion.
func (s *Server) Exec(ctx context.Context, r *pb.ExecSandboxRequest) (*pb.ExecSandboxResponse, error) {
	lid, err := s.running(r.GetSandboxId())
	if err != nil {
		return nil, err
	}
	if err := s.lat.Wait(ctx, s.opts.Latency.Exec); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	argv := append(append([]string(nil), r.GetCommand()...), r.GetArgs()...)
	if len(argv) == 0 {
		return nil, status.Error(codes.InvalidArgument, "command is required")
	}
	timeout := time.Duration(r.GetMaxTimeoutSeconds()) * time.Second
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	res, err := s.local.Exec(ctx, lid, core.ExecRequest{Command: argv, Timeout: timeout, MaxOutputBytes: 64 << 20})
	if err != nil {
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return nil, status.Errorf(codes.Internal, "exec: %v", err)
	}
	if res.TimedOut {
		return nil, status.Errorf(codes.DeadlineExceeded, "command timed out after %d seconds", r.GetMaxTimeoutSeconds())
	}
	return &pb.ExecSandboxResponse{Result: &pb.ExecResponse{Stdout: []byte(res.Stdout), Stderr: []byte(res.Stderr), ExitCode: int32(res.ExitCode)}}, nil
}

// AddFile writes a file, making its parent directories.
func (s *Server) AddFile(ctx context.Context, r *pb.AddFileSandboxRequest) (*pb.AddFileSandboxResponse, error) {
	lid, err := s.running(r.GetSandboxId())
	if err != nil {
		return nil, err
	}
	if err := s.lat.Wait(ctx, s.opts.Latency.Files); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	if err := s.local.WriteFile(ctx, lid, r.GetFilepath(), r.GetFileContents(), 0o644); err != nil {
		return &pb.AddFileSandboxResponse{Success: false, ErrorMessage: err.Error()}, nil
	}
	return &pb.AddFileSandboxResponse{Success: true}, nil
}

// RetrieveFile reads a whole file.
func (s *Server) RetrieveFile(ctx context.Context, r *pb.RetrieveFileSandboxRequest) (*pb.RetrieveFileSandboxResponse, error) {
	lid, err := s.running(r.GetSandboxId())
	if err != nil {
		return nil, err
	}
	if err := s.lat.Wait(ctx, s.opts.Latency.Files); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	data, err := s.local.ReadFile(ctx, lid, r.GetFilepath(), 100<<20)
	if err != nil {
		return &pb.RetrieveFileSandboxResponse{Success: false, ErrorMessage: err.Error()}, nil
	}
	return &pb.RetrieveFileSandboxResponse{Success: true, FileContents: data}, nil
}
