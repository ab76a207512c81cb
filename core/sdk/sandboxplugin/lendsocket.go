package sandboxplugin

import (
	"context"
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

// LendSocket lends sandboxes to environments on a Unix socket of its own:
// it serves the lent-sandbox wire (core/sdk/wire/frames) in a directory only this
// user can enter, from the first loan until its life ends or Close, and
// answers a call only for a sandbox on loan now, and, when it requires
// tokens, only a call carrying that loan's token. The host lends on one per
// env plugin, for the length of each episode; a backend on one for all its
// sandboxes, from Create to Destroy.
type LendSocket struct {
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
}

// Loan is one sandbox on loan, until Release.
type Loan struct {
	s       *LendSocket
	sb      Sandbox
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

// errNoSocket marks a loan refused because the socket could not be opened.
var errNoSocket = errors.New("cannot open the lent-sandbox socket")

// NewLendSocket makes a socket of kind that lends until life ends or
// Close; with tokens, each call must carry its loan's token.
func NewLendSocket(life context.Context, kind frames.SocketKind, tokens bool, log hclog.Logger) *LendSocket {
	return &LendSocket{life: life, kind: kind, tokens: tokens, log: log, loans: map[string]*Loan{}}
}

// Lend puts sb on loan until Release, opening the socket if none is open;
// token is what calls must carry on a socket that requires tokens.
func (s *LendSocket) Lend(sb Sandbox, token []byte) (*Loan, error) {
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

// listen opens the socket and serves it. Called with mu held.
func (s *LendSocket) listen() error {
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
func (s *LendSocket) serve(ctx context.Context, ln net.Listener, sock string, served chan struct{}) {
	defer close(served)
	if err := frames.Serve(ctx, ln, "lent sandbox", s.handle, s.log); err != nil {
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

// ReleaseID releases the loan of sandbox id and returns its sandbox; false
// when it has none.
func (s *LendSocket) ReleaseID(ctx context.Context, id string) (Sandbox, bool) {
	s.mu.Lock()
	l := s.loans[id]
	s.mu.Unlock()
	if l == nil {
		return nil, false
	}
	l.Release(ctx)
	return l.sb, true
}

// Close releases every loan, then closes the socket and removes it;
// nothing is lent after.
func (s *LendSocket) Close() {
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
func (s *LendSocket) wait(ctx context.Context, loans []*Loan) {
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

// run is the socket's LentRunner.
func (s *LendSocket) run(ctx context.Context, id string, token []byte, op func(context.Context, Sandbox) error) error {
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

func (s *LendSocket) handle(ctx context.Context, c *rlhostpb.LentCall) *rlhostpb.LentReply {
	return AnswerLent(ctx, c, s.run)
}
