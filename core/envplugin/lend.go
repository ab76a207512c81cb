package envplugin

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/lendwire"
	rlhostpb "github.com/rlhost/rlhost/core/proto"
	"github.com/rlhost/rlhost/core/sandboxplugin"
)

// lender is the host side of lending sandboxes to one env plugin process.
// It serves the lent-sandbox wire (core/lendwire) on a Unix socket of its
// own, in a private directory, from the first episode with a sandbox to the
// client's end, so an episode costs the plugin no new connection. Each call
// names its sandbox and is served only while that sandbox is leased to a
// live episode of this client: an env can reach the sandboxes of its own
// live episodes and nothing else.
type lender struct {
	life context.Context // ends with the plugin client
	log  hclog.Logger

	mu     sync.Mutex
	sock   string // the socket's path; "" until the first lease
	leases map[string]*lease
}

// lease is one sandbox lent to one episode. Its context ends with the
// episode, cutting off calls still running on the sandbox.
type lease struct {
	id     string
	sb     Sandbox
	sock   string // what the plugin connects to
	ctx    context.Context
	cancel context.CancelFunc
}

func newLender(life context.Context, log hclog.Logger) *lender {
	return &lender{life: life, log: log, leases: map[string]*lease{}}
}

// lend leases sb until release.
func (l *lender) lend(sb Sandbox) (*lease, error) {
	id := sb.ID()
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, dup := l.leases[id]; dup {
		// Requests carry only the sandbox id, so two live leases of one id
		// could not be told apart.
		return nil, fmt.Errorf("sandbox %s is already lent to a live episode of this environment", id)
	}
	if l.sock == "" {
		if err := l.listen(); err != nil {
			return nil, err
		}
	}
	ls := &lease{id: id, sb: sb, sock: l.sock}
	ls.ctx, ls.cancel = context.WithCancel(context.Background())
	l.leases[id] = ls
	return ls, nil
}

// listen opens the socket in a directory only this user can enter, and
// serves it until the client's end. Called with mu held.
func (l *lender) listen() error {
	if err := l.life.Err(); err != nil {
		return fmt.Errorf("lend a sandbox: the env plugin is gone: %w", err)
	}
	ln, sock, err := lendwire.ListenPrivate(lendwire.HostLentSocket)
	if err != nil {
		return fmt.Errorf("lend a sandbox: %w", err)
	}
	l.sock = sock
	go l.serve(ln, filepath.Dir(sock))
	return nil
}

// serve runs the socket until the client ends, then removes it.
func (l *lender) serve(ln net.Listener, dir string) {
	if err := lendwire.Serve(l.life, ln, "lent sandbox", l.handle, l.log); err != nil {
		l.log.Error("lent sandbox socket failed", "error", err)
	}
	os.RemoveAll(dir)
	// Back here early only on a failed accept: the next episode gets a
	// fresh socket rather than a dead path.
	l.mu.Lock()
	if l.sock == filepath.Join(dir, "sandbox.sock") {
		l.sock = ""
	}
	l.mu.Unlock()
}

// release ends the lease, cutting off its running calls.
func (l *lender) release(ls *lease) {
	ls.cancel()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.leases[ls.id] == ls {
		delete(l.leases, ls.id)
	}
}

// run is the host socket's sandboxplugin.LentRunner: it runs op on the
// sandbox leased under id, with a context that also ends when the lease
// does. The lease is the authority here, so a call's token is not looked
// at; an id not leased now is NotFound.
func (l *lender) run(ctx context.Context, id string, _ []byte, op func(context.Context, Sandbox) error) error {
	l.mu.Lock()
	ls := l.leases[id]
	l.mu.Unlock()
	if ls == nil {
		return fmt.Errorf("sandbox %q is not lent to this environment (its episode ended?): %w", id, core.ErrNotFound)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(ls.ctx, cancel)()
	return op(ctx, ls.sb)
}

// handle answers one call from the plugin.
func (l *lender) handle(ctx context.Context, c *rlhostpb.LentCall) *rlhostpb.LentReply {
	return sandboxplugin.AnswerLent(ctx, c, l.run)
}
