package sandboxplugin

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/lendwire"
	rlhostpb "github.com/rlhost/rlhost/core/proto"
)

// lender is the plugin side of a backend lending its sandboxes itself: it
// serves the lent-sandbox wire on a Unix socket of the plugin process, from
// the first lease to Shutdown, and answers a call only for a sandbox leased
// now and only when the call carries that lease's token. An env's calls
// then make one trip, env to backend, instead of two through the host.
type lender struct {
	ops SandboxOps
	log hclog.Logger

	mu      sync.Mutex
	closed  bool
	sock    string // the socket's path; "" until the first lease
	stop    context.CancelFunc
	served  chan struct{} // closed when the socket is gone
	refused bool          // the socket could not be opened: lend nothing
	leases  map[string]*backendLease
}

// backendLease is one sandbox lent until it is destroyed.
type backendLease struct {
	token   []byte
	sb      *Counted
	ctx     context.Context // ends with the lease, cutting off its calls
	cancel  context.CancelFunc
	running sync.WaitGroup // its calls; added to only while it is in leases
}

// releaseWait bounds how long a release waits for the calls it cut off: a
// backend that does not heed a cancelled context must not hold up its
// Destroy for good.
const releaseWait = 10 * time.Second

// tokenBytes is a token's length: 256 random bits.
const tokenBytes = 32

func newLender(ops SandboxOps, log hclog.Logger) *lender {
	return &lender{ops: ops, log: log, leases: map[string]*backendLease{}}
}

// lend leases sandbox id until release. A lender that cannot open its
// socket lends nothing and answers the zero Lease: the host then relays the
// env's calls itself, as it does for a backend that does not lend.
func (l *lender) lend(id string, defaultTimeout time.Duration) (Lease, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return Lease{}, fmt.Errorf("lend sandbox %s: the backend is shutting down: %w", id, core.ErrUnavailable)
	}
	if _, dup := l.leases[id]; dup {
		return Lease{}, fmt.Errorf("lend sandbox %s: it is already lent", id)
	}
	if l.sock == "" && !l.refused {
		if err := l.listen(); err != nil {
			l.refused = true
			l.log.Warn("cannot open the lent-sandbox socket; the host will relay environments' calls", "error", err)
		}
	}
	if l.refused {
		return Lease{}, nil
	}
	tok := make([]byte, tokenBytes)
	if _, err := rand.Read(tok); err != nil {
		return Lease{}, fmt.Errorf("lend sandbox %s: %w", id, err)
	}
	ls := &backendLease{token: tok, sb: &Counted{Bound: Bound{Backend: l.ops, SandboxID: id, DefaultTimeout: defaultTimeout}}}
	ls.ctx, ls.cancel = context.WithCancel(context.Background())
	l.leases[id] = ls
	return NewLease(l.sock, tok), nil
}

// listen opens the socket in a directory only this user can enter. Called
// with mu held.
func (l *lender) listen() error {
	ln, sock, err := lendwire.ListenPrivate(lendwire.BackendLentSocket)
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan struct{})
	l.sock, l.stop, l.served = sock, stop, served
	go func() {
		defer close(served)
		defer os.RemoveAll(filepath.Dir(sock))
		if err := lendwire.Serve(ctx, ln, "lent sandbox", l.handle, l.log); err != nil {
			l.log.Error("lent sandbox socket failed", "error", err)
		}
		// Back here early only when the socket broke (Serve retries a
		// shortage of fds): the next lease gets a fresh socket rather than
		// a dead path. The calls on this one were cut off with it.
		l.mu.Lock()
		if l.sock == sock {
			l.sock = ""
		}
		l.mu.Unlock()
	}()
	return nil
}

// release ends the lease of sandbox id, if it has one, cutting off its
// running calls and waiting for them (up to releaseWait, or until ctx
// ends), and returns what was done through it.
func (l *lender) release(ctx context.Context, id string) (LeaseUse, bool) {
	l.mu.Lock()
	ls := l.leases[id]
	delete(l.leases, id)
	l.mu.Unlock()
	if ls == nil {
		return LeaseUse{}, false
	}
	ls.cancel()
	done := make(chan struct{})
	go func() {
		ls.running.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	case <-time.After(releaseWait):
		l.log.Warn("lent calls still running after their lease ended", "sandbox", id, "waited", releaseWait)
	}
	return ls.sb.Use(), true
}

// close ends every lease, waiting (up to releaseWait) for the calls it cut
// off, then the socket, and removes it; nothing is lent after.
func (l *lender) close() {
	l.mu.Lock()
	l.closed = true
	leases := l.leases
	l.leases = map[string]*backendLease{}
	stop, served := l.stop, l.served
	l.mu.Unlock()
	for _, ls := range leases {
		ls.cancel()
	}
	// The backend's Shutdown must not overlap lent calls either.
	done := make(chan struct{})
	go func() {
		for _, ls := range leases {
			ls.running.Wait()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(releaseWait):
		l.log.Warn("lent calls still running at shutdown", "waited", releaseWait)
	}
	if stop != nil {
		stop()
		<-served
	}
}

// run is the socket's LentRunner: the token must be the lease's.
func (l *lender) run(ctx context.Context, id string, token []byte, op func(context.Context, Sandbox) error) error {
	l.mu.Lock()
	ls := l.leases[id]
	ok := ls != nil && subtle.ConstantTimeCompare(ls.token, token) == 1
	if ok {
		ls.running.Add(1) // under mu: release cannot be waiting yet
	}
	l.mu.Unlock()
	if !ok {
		return fmt.Errorf("sandbox %q is not lent to this caller (destroyed, or a wrong token): %w", id, core.ErrNotFound)
	}
	defer ls.running.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(ls.ctx, cancel)()
	return op(ctx, ls.sb)
}

func (l *lender) handle(ctx context.Context, c *rlhostpb.LentCall) *rlhostpb.LentReply {
	return AnswerLent(ctx, c, l.run)
}
