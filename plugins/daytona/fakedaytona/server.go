// Package fakedaytona is an in-process fake of the Daytona REST API (control
// plane and per-sandbox toolbox) for tests that must run the real Daytona Go
// SDK end to end without a cloud account.
//
// Routes and payloads follow the SDK's generated clients (api-client-go and
// toolbox-api-client-go v0.173.0); requests are decoded with the generated
// models, so a payload the SDK would not send is rejected. Exec runs the
// command for real with the host's /bin/sh inside a per-sandbox directory,
// and the file API reads and writes below that directory.
//
// It is deliberately not an isolation boundary and not a full Daytona: no
// snapshots, builds, volumes, previews, sessions or PTYs, no organisations,
// and no automatic stop or delete timers (it records the intervals so tests
// can check them). It needs no testing.T and is safe for concurrent use.
package fakedaytona

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rlhost/rlhost/plugins/fakelatency"
)

// DefaultAPIKey is the key a Server accepts when Options.APIKey is empty.
const DefaultAPIKey = "fake-daytona-key"

// ExecMode selects how the fake toolbox interprets ExecuteRequest.command.
type ExecMode string

// Daytona daemons have shipped two behaviours for /process/execute.
const (
	// ExecShell feeds the command to /bin/sh on stdin, as current daemons do.
	ExecShell ExecMode = "shell"
	// ExecArgv splits the command on spaces honouring '…' and "…" quotes and
	// runs it without a shell, as older daemons did.
	ExecArgv ExecMode = "argv"
)

// Options configure a Server. The zero value is usable.
type Options struct {
	APIKey string // the one bearer token accepted; DefaultAPIKey when empty
	// StartPolls is how many GETs a new sandbox answers in state "creating"
	// before it reports "started", so clients exercise their polling.
	// Negative means it is "started" straight away.
	StartPolls int
	ExecMode   ExecMode // ExecShell when empty
	Shell      string   // /bin/sh when empty
	// Latency makes calls take as long as the real service's: a new
	// sandbox stays "creating" for a Create latency, an exec waits an
	// Exec latency before its command starts, and every other toolbox
	// call a Files latency.
	Latency fakelatency.Model
}

// Request is one logged HTTP request.
type Request struct {
	Method string
	Path   string
	Status int
}

// Sandbox is a snapshot of one fake sandbox.
type Sandbox struct {
	ID, Name, State    string
	Labels, Env        map[string]string
	Snapshot           string
	Dockerfile         string
	CPU, Memory, Disk  int // vCPUs, GiB, GiB as requested (0 = not given)
	AutoStopInterval   int // minutes; -1 when not given
	AutoDeleteInterval int // minutes; -1 disabled; -2 when not given
	NetworkBlockAll    bool
	NetworkAllowList   string
	Target             string
	CreatedAt          time.Time
	Root               string // host directory that holds its filesystem
}

type sandbox struct {
	Sandbox
	polls   int       // GETs left before "creating" turns into "started"
	readyAt time.Time // and not before this (Options.Latency.Create)
}

// Server is a running fake. Its zero value is not usable; call New.
type Server struct {
	// URL is the API base URL to pass as api_url (it ends in /api).
	URL string
	// ToolboxURL is the toolbox proxy URL the API hands out for sandboxes.
	ToolboxURL string
	// APIKey is the bearer token accepted at start; see SetAPIKey.
	APIKey string

	opts Options
	hs   *httptest.Server
	root string
	lat  *fakelatency.Source

	mu        sync.Mutex
	apiKey    string
	seq       int
	sandboxes map[string]*sandbox
	creates   int
	log       []Request
	f         faults
	// procs holds the process groups of running execs per sandbox root, so
	// deleting or stopping a sandbox kills what runs in it, as Daytona does.
	procs map[string]map[int]bool
}

// trackLocked records (or forgets) a running exec's process group.
func (s *Server) trackLocked(root string, pgid int, running bool) {
	if s.procs == nil {
		s.procs = map[string]map[int]bool{}
	}
	if running {
		if s.procs[root] == nil {
			s.procs[root] = map[int]bool{}
		}
		s.procs[root][pgid] = true
		return
	}
	delete(s.procs[root], pgid)
}

// killLocked ends every exec running in the sandbox rooted at root.
func (s *Server) killLocked(root string) {
	for pgid := range s.procs[root] {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	delete(s.procs, root)
}

// faults are the failure knobs; each count is consumed by matching requests.
type faults struct {
	rateLimitCreates int
	retryAfter       time.Duration
	failCreates      int
	failCreateStatus int
	failStarts       int
	failDeletes      int
	failDeleteStatus int
	execDelay        time.Duration
	unavailable      int
	loseCreates      int
	rateLimitExecs   int
}

// New starts a fake Daytona on a loopback port. Call Close when done.
func New(opts Options) (*Server, error) {
	if opts.APIKey == "" {
		opts.APIKey = DefaultAPIKey
	}
	if opts.ExecMode == "" {
		opts.ExecMode = ExecShell
	}
	if opts.Shell == "" {
		opts.Shell = "/bin/sh"
	}
	if opts.StartPolls == 0 {
		opts.StartPolls = 1
	}
	root, err := os.MkdirTemp("", "fakedaytona-")
	if err != nil {
		return nil, fmt.Errorf("fakedaytona: sandbox root: %w", err)
	}
	s := &Server{opts: opts, root: root, APIKey: opts.APIKey, apiKey: opts.APIKey, sandboxes: map[string]*sandbox{},
		lat: fakelatency.NewSource(opts.Latency.Seed)}
	s.hs = httptest.NewServer(s.routes())
	s.URL = s.hs.URL + "/api"
	s.ToolboxURL = s.hs.URL + "/toolbox"
	return s, nil
}

// Close stops the server and removes every sandbox's files.
func (s *Server) Close() {
	s.mu.Lock()
	for root := range s.procs {
		s.killLocked(root)
	}
	s.mu.Unlock()
	s.hs.Close()
	os.RemoveAll(s.root)
}

// Sandboxes returns the sandboxes that exist now (not deleted), oldest first.
func (s *Server) Sandboxes() []Sandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Sandbox, 0, len(s.sandboxes))
	for _, sb := range s.sandboxes {
		out = append(out, sb.copy())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Sandbox returns one sandbox by id or name.
func (s *Server) Sandbox(idOrName string) (Sandbox, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.findLocked(idOrName)
	if sb == nil {
		return Sandbox{}, false
	}
	return sb.copy(), true
}

// Creates is the number of sandboxes created successfully so far.
func (s *Server) Creates() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.creates
}

// Requests returns the request log in arrival order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.log...)
}

// Count returns how many logged requests have this method and a path that
// contains substr, with the given status (0 matches any status).
func (s *Server) Count(method, substr string, status int) int {
	n := 0
	for _, r := range s.Requests() {
		if r.Method == method && strings.Contains(r.Path, substr) && (status == 0 || r.Status == status) {
			n++
		}
	}
	return n
}

// RateLimitCreates makes the next n create requests fail with 429 and a
// Retry-After header of retryAfter (rounded up to whole seconds; none if 0).
func (s *Server) RateLimitCreates(n int, retryAfter time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.f.rateLimitCreates, s.f.retryAfter = n, retryAfter
}

// FailCreates makes the next n create requests fail with status (for
// example 400 for a quota error, or 500).
func (s *Server) FailCreates(n, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.f.failCreates, s.f.failCreateStatus = n, status
}

// LoseCreateResponses makes the next n creates succeed on the server but
// answer 502, as when a gateway drops the response: a client that simply
// retries ends up with two sandboxes.
func (s *Server) LoseCreateResponses(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.f.loseCreates = n
}

// RateLimitExecs makes the next n execute requests fail with 429 before
// the command runs.
func (s *Server) RateLimitExecs(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.f.rateLimitExecs = n
}

// FailStarts makes the next n created sandboxes end in state "error"
// instead of "started".
func (s *Server) FailStarts(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.f.failStarts = n
}

// FailDeletes makes the next n delete requests fail with status (500 if 0).
func (s *Server) FailDeletes(n, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if status == 0 {
		status = http.StatusInternalServerError
	}
	s.f.failDeletes, s.f.failDeleteStatus = n, status
}

// Unavailable makes the next n API (not toolbox) requests fail with 503.
func (s *Server) Unavailable(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.f.unavailable = n
}

// SetAPIKey changes the accepted key, as when a key is revoked or rotated.
func (s *Server) SetAPIKey(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.apiKey = key
}

// SetExecDelay delays every exec by d before the command starts; a delay at
// least as long as the request's timeout ends in the daemon's 408.
func (s *Server) SetExecDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.f.execDelay = d
}

// AddSandbox makes a started sandbox as if another client had created it,
// and returns its id.
func (s *Server) AddSandbox(name string, labels map[string]string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, err := s.newSandboxLocked(name)
	if err != nil {
		return "", err
	}
	for k, v := range labels {
		sb.Labels[k] = v
	}
	sb.State, sb.polls = "started", 0
	return sb.ID, nil
}

func (sb *sandbox) copy() Sandbox {
	c := sb.Sandbox
	c.Labels = cloneMap(sb.Labels)
	c.Env = cloneMap(sb.Env)
	return c
}

func cloneMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func (s *Server) findLocked(idOrName string) *sandbox {
	if sb, ok := s.sandboxes[idOrName]; ok {
		return sb
	}
	for _, sb := range s.sandboxes {
		if sb.Name == idOrName {
			return sb
		}
	}
	return nil
}

// newSandboxLocked allocates an id, a filesystem root and the defaults the
// real API fills in.
func (s *Server) newSandboxLocked(name string) (*sandbox, error) {
	s.seq++
	id := fmt.Sprintf("fake-%06d", s.seq)
	if name == "" {
		name = id
	}
	if s.findLocked(name) != nil {
		return nil, fmt.Errorf("sandbox with name %s already exists", name)
	}
	root, err := os.MkdirTemp(s.root, id+"-")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(root+"/home/daytona", 0o755); err != nil {
		return nil, err
	}
	sb := &sandbox{Sandbox: Sandbox{
		ID: id, Name: name, State: "creating",
		Labels: map[string]string{}, Env: map[string]string{},
		CPU: 1, Memory: 1, Disk: 3, AutoStopInterval: 15, AutoDeleteInterval: -1,
		Target: "us", CreatedAt: time.Now().UTC(), Root: root,
	}, polls: s.opts.StartPolls}
	if sb.polls < 0 {
		sb.State, sb.polls = "started", 0
	}
	s.sandboxes[id] = sb
	return sb, nil
}

// statusRecorder remembers the status for the request log.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// routes wires the endpoints the SDK uses. Paths are those of the generated
// clients: the API under /api, the toolbox under /toolbox/{sandboxId}.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/sandbox", s.createSandbox)
	mux.HandleFunc("GET /api/sandbox", s.listSandboxes)
	mux.HandleFunc("GET /api/sandbox/paginated", s.listSandboxesPaginated)
	mux.HandleFunc("GET /api/sandbox/{id}", s.getSandbox)
	mux.HandleFunc("DELETE /api/sandbox/{id}", s.deleteSandbox)
	mux.HandleFunc("POST /api/sandbox/{id}/start", s.startSandbox)
	mux.HandleFunc("POST /api/sandbox/{id}/stop", s.stopSandbox)

	mux.HandleFunc("POST /toolbox/{id}/process/execute", s.execute)
	mux.HandleFunc("POST /toolbox/{id}/files/upload", s.uploadFile)
	mux.HandleFunc("POST /toolbox/{id}/files/bulk-download", s.bulkDownload)
	mux.HandleFunc("GET /toolbox/{id}/files/download", s.download)
	mux.HandleFunc("GET /toolbox/{id}/files/info", s.fileInfo)
	mux.HandleFunc("GET /toolbox/{id}/files", s.listFiles)
	mux.HandleFunc("POST /toolbox/{id}/files/folder", s.createFolder)
	mux.HandleFunc("POST /toolbox/{id}/files/permissions", s.setPermissions)
	mux.HandleFunc("DELETE /toolbox/{id}/files", s.deleteFile)

	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		defer func() {
			s.mu.Lock()
			s.log = append(s.log, Request{Method: r.Method, Path: r.URL.Path, Status: rec.status})
			s.mu.Unlock()
		}()
		s.mu.Lock()
		key := s.apiKey
		s.mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer "+key {
			writeError(rec, http.StatusUnauthorized, "Unauthorized")
			return
		}
		if strings.HasPrefix(r.URL.Path, "/api/") && s.take(&s.f.unavailable) {
			writeError(rec, http.StatusServiceUnavailable, "Service Unavailable")
			return
		}
		if !s.wait(r) {
			return // the client went away
		}
		mux.ServeHTTP(rec, r)
	})
}

// wait holds a toolbox call for its latency (Options.Latency); false
// when the client went away meanwhile.
func (s *Server) wait(r *http.Request) bool {
	l := s.opts.Latency.Files
	switch {
	case !strings.HasPrefix(r.URL.Path, "/toolbox/"):
		return true
	case strings.HasSuffix(r.URL.Path, "/process/execute"):
		l = s.opts.Latency.Exec
	}
	return s.lat.Wait(r.Context(), l) == nil
}

// take consumes one unit of a fault counter.
func (s *Server) take(n *int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if *n > 0 {
		*n--
		return true
	}
	return false
}

// writeError answers in the shape of Daytona's NestJS/daemon errors, which
// the SDK's error conversion reads the message from.
func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{
		"statusCode": status,
		"message":    msg,
		"error":      http.StatusText(status),
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
