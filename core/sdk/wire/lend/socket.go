package lend

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/sdk/wire/frames"
	"github.com/rlhost/rlhost/core/sdk/wire/rlhostpb"
)

// Socket lends sandboxes to environments on a Unix socket of its own: it
// serves the lent-sandbox calls in a directory only this user can enter,
// from the first loan until its life ends or Close, and answers a call
// only for a sandbox on loan now, and, when it requires tokens, only a
// call carrying that loan's token.
type Socket struct {
	life   context.Context
	kind   frames.SocketKind
	tokens bool
	log    hclog.Logger

	mu     sync.Mutex
	closed bool
	sock   string // the socket's path; "" until the first loan
	stop   context.CancelFunc
	served chan struct{} // closed once the socket is gone
	loans  map[string]*Loan

	leaseMu sync.Mutex // one Lease at a time, so a socket that cannot open is reported once
	refused bool       // Lease found the socket cannot be opened: it lends nothing
}

// Loan is one sandbox on loan, until Release.
type Loan struct {
	s       *Socket
	sb      core.Sandbox
	token   []byte
	sock    string
	ctx     context.Context // ends with the loan, cutting off its calls
	cancel  context.CancelFunc
	running sync.WaitGroup // its calls; added to only while it is in loans
}

// releaseWait bounds how long a release waits for the calls it cut off: a
// sandbox that does not heed a cancelled context must not hold up the
// episode's end or the sandbox's destroy for good.
const releaseWait = 10 * time.Second

// tokenBytes is a token's length: 256 random bits.
const tokenBytes = 32

// errNoSocket marks a loan refused because the socket could not be opened.
var errNoSocket = errors.New("cannot open the lent-sandbox socket")

// NewHostSocket is the host's socket for one env plugin process, which it
// serves until life ends (the plugin client's) or Close: each episode's
// sandbox is on loan from the episode's start to its end, so an
// environment reaches the sandboxes of its own live episodes and nothing
// else, and an episode costs the plugin no new connection. Calls carry no
// token the host checks (an older plugin sends none); the loan is the
// authority.
func NewHostSocket(life context.Context, log hclog.Logger) *Socket {
	return newSocket(life, frames.HostLentSocket, false, log)
}

// NewBackendSocket is a backend plugin's socket, on which it lends its own
// sandboxes (Lease) until Close. An environment's calls then make one
// trip, environment to backend, instead of two through the host.
func NewBackendSocket(log hclog.Logger) *Socket {
	return newSocket(context.Background(), frames.BackendLentSocket, true, log)
}

func newSocket(life context.Context, kind frames.SocketKind, tokens bool, log hclog.Logger) *Socket {
	return &Socket{life: life, kind: kind, tokens: tokens, log: log, loans: map[string]*Loan{}}
}

// Lend puts sb on loan until Release, opening the socket if none is open;
// token is what calls must carry on a socket that requires tokens.
func (s *Socket) Lend(sb core.Sandbox, token []byte) (*Loan, error) {
	id := sb.ID()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.life.Err() != nil {
		return nil, fmt.Errorf("lend sandbox %s: the lent-sandbox socket is closed: %w", id, core.ErrUnavailable)
	}
	if _, dup := s.loans[id]; dup {
		// Calls name only the sandbox id, so two loans of one id could not
		// be told apart.
		return nil, fmt.Errorf("sandbox %s is already lent", id)
	}
	if s.sock == "" {
		if err := s.listen(); err != nil {
			return nil, fmt.Errorf("lend sandbox %s: %w: %w", id, errNoSocket, err)
		}
	}
	l := &Loan{s: s, sb: sb, token: token, sock: s.sock}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	s.loans[id] = l
	return l, nil
}

// Lease lends sb under a new token until Release, and returns the lease to
// hand its environment. A socket that cannot be opened lends nothing from
// then on and answers the zero Lease: the host then relays the
// environment's calls itself, as it does for a backend that does not lend.
func (s *Socket) Lease(sb *Bound) (Lease, error) {
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	if s.refused {
		return Lease{}, nil
	}
	tok := make([]byte, tokenBytes)
	if _, err := rand.Read(tok); err != nil {
		return Lease{}, fmt.Errorf("lend sandbox %s: %w", sb.ID(), err)
	}
	loan, err := s.Lend(sb, tok)
	if errors.Is(err, errNoSocket) {
		s.refused = true
		s.log.Warn("the host will relay environments' calls", "error", err)
		return Lease{}, nil
	}
	if err != nil {
		return Lease{}, err
	}
	return NewLease(loan.Socket(), tok), nil
}

// listen opens the socket and serves it. Called with mu held.
func (s *Socket) listen() error {
	ln, sock, err := frames.ListenPrivate(s.kind)
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(s.life)
	served := make(chan struct{})
	s.sock, s.stop, s.served = sock, stop, served
	go s.serve(ctx, ln, sock, served)
	return nil
}

// serve runs the socket until ctx ends, then removes it.
func (s *Socket) serve(ctx context.Context, ln net.Listener, sock string, served chan struct{}) {
	defer close(served)
	if err := frames.Serve(ctx, ln, wireName, s.answer, s.log); err != nil {
		s.log.Error("lent sandbox socket failed", "error", err)
	}
	os.RemoveAll(filepath.Dir(sock))
	// Back here early only when the socket broke (Serve retries a shortage
	// of fds): the next loan gets a fresh socket rather than a dead path.
	// The calls on this one were cut off with it.
	s.mu.Lock()
	if s.sock == sock {
		s.sock = ""
	}
	s.mu.Unlock()
}

// Socket is the path of the socket the loan is served on.
func (l *Loan) Socket() string { return l.sock }

// Release ends the loan, cutting off its running calls and waiting for
// them (up to releaseWait, or until ctx ends). Releasing twice is harmless.
func (l *Loan) Release(ctx context.Context) {
	s := l.s
	s.mu.Lock()
	if s.loans[l.sb.ID()] == l {
		delete(s.loans, l.sb.ID())
	}
	s.mu.Unlock()
	l.cancel()
	s.wait(ctx, []*Loan{l})
}

// Release releases the loan of sandbox id (see Loan.Release) and returns
// what was done through it (its sandbox's Usage, when the sandbox is a
// Bound); false when it has none.
func (s *Socket) Release(ctx context.Context, id string) (Usage, bool) {
	s.mu.Lock()
	l := s.loans[id]
	s.mu.Unlock()
	if l == nil {
		return Usage{}, false
	}
	l.Release(ctx)
	if b, ok := l.sb.(*Bound); ok {
		return b.Usage(), true
	}
	return Usage{}, true
}

// Close releases every loan, then closes the socket and removes it;
// nothing is lent after.
func (s *Socket) Close() {
	s.mu.Lock()
	s.closed = true
	var loans []*Loan
	for _, l := range s.loans {
		loans = append(loans, l)
	}
	s.loans = map[string]*Loan{}
	stop, served := s.stop, s.served
	s.mu.Unlock()
	for _, l := range loans {
		l.cancel()
	}
	s.wait(context.Background(), loans)
	if stop != nil {
		stop()
		<-served
	}
}

// wait waits for the calls of loans that were cut off, up to releaseWait
// or until ctx ends.
func (s *Socket) wait(ctx context.Context, loans []*Loan) {
	done := make(chan struct{})
	go func() {
		for _, l := range loans {
			l.running.Wait()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	case <-time.After(releaseWait):
		s.log.Warn("lent calls still running after their loan ended", "waited", releaseWait)
	}
}

// run runs op on the sandbox a call names, once it has checked that the
// caller may use it (it is on loan, and the call carries its token where
// the socket requires one), with a context that also ends when the loan
// does. A sandbox the caller may not use is an error wrapping
// core.ErrNotFound, whether or not it exists, so the wire tells an
// environment nothing of other sandboxes.
func (s *Socket) run(ctx context.Context, id string, token []byte, op func(context.Context, core.Sandbox) error) error {
	s.mu.Lock()
	l := s.loans[id]
	ok := l != nil && (!s.tokens || subtle.ConstantTimeCompare(l.token, token) == 1)
	if ok {
		l.running.Add(1) // under mu: no release is waiting yet
	}
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("sandbox %q is not lent to this environment (its episode ended, or a wrong token): %w", id, core.ErrNotFound)
	}
	defer l.running.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(l.ctx, cancel)()
	return op(ctx, l.sb)
}

// answer answers one lent-sandbox call. The host's socket and a backend's
// both answer here, so an environment sees the same calls and errors on
// either.
func (s *Socket) answer(ctx context.Context, c *rlhostpb.LentCall) *rlhostpb.LentReply {
	var (
		rep *rlhostpb.LentReply
		err error
	)
	tok := c.GetToken()
	switch x := c.GetCall().(type) {
	case *rlhostpb.LentCall_Info:
		var r *rlhostpb.SandboxInfo
		err = s.run(ctx, x.Info.GetId(), tok, func(_ context.Context, sb core.Sandbox) error {
			r = &rlhostpb.SandboxInfo{Id: sb.ID()}
			return nil
		})
		rep = &rlhostpb.LentReply{Result: &rlhostpb.LentReply_Info{Info: r}}
	case *rlhostpb.LentCall_Exec:
		var r *rlhostpb.ExecResult
		err = s.run(ctx, x.Exec.GetSandboxId(), tok, func(ctx context.Context, sb core.Sandbox) error {
			start := time.Now()
			res, err := sb.Exec(ctx, rlhostpb.ToExecRequest(x.Exec))
			if err == nil {
				if res.Duration == 0 { // as the gRPC server fills it in
					res.Duration = time.Since(start)
				}
				r = rlhostpb.FromExecResult(res)
			}
			return err
		})
		rep = &rlhostpb.LentReply{Result: &rlhostpb.LentReply_Exec{Exec: r}}
	case *rlhostpb.LentCall_ReadFile:
		q := x.ReadFile
		var data []byte
		err = s.run(ctx, q.GetSandboxId(), tok, func(ctx context.Context, sb core.Sandbox) (err error) {
			data, err = sb.ReadFile(ctx, string(q.GetPath()), q.GetMaxBytes())
			return err
		})
		rep = &rlhostpb.LentReply{Result: &rlhostpb.LentReply_ReadFile{ReadFile: &rlhostpb.ReadFileResponse{Data: data}}}
	case *rlhostpb.LentCall_WriteFile:
		q := x.WriteFile
		err = s.run(ctx, q.GetSandboxId(), tok, func(ctx context.Context, sb core.Sandbox) error {
			return sb.WriteFile(ctx, string(q.GetPath()), q.GetData(), q.GetMode())
		})
		rep = &rlhostpb.LentReply{Result: &rlhostpb.LentReply_WriteFile{WriteFile: &rlhostpb.Empty{}}}
	case *rlhostpb.LentCall_ListFiles:
		q := x.ListFiles
		var fs *rlhostpb.ListFilesResponse
		err = s.run(ctx, q.GetSandboxId(), tok, func(ctx context.Context, sb core.Sandbox) error {
			files, err := sb.ListFiles(ctx, string(q.GetPath()))
			if err == nil {
				fs = rlhostpb.FromFiles(files)
			}
			return err
		})
		rep = &rlhostpb.LentReply{Result: &rlhostpb.LentReply_ListFiles{ListFiles: fs}}
	default: // a call this side does not know (a newer plugin)
		err = fmt.Errorf("lent sandbox call %T: %w", x, core.ErrUnimplemented)
	}
	if err != nil {
		return &rlhostpb.LentReply{Result: &rlhostpb.LentReply_Error{Error: rlhostpb.ToLentError(err)}}
	}
	return rep
}
