package sandboxplugin

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/rlhost/rlhost/core/sdk/wire/frames"
)

// lender is the plugin side of a backend lending its sandboxes itself, on
// a LendSocket of the plugin process that requires each loan's token. An
// env's calls then make one trip, env to backend, instead of two through
// the host.
type lender struct {
	ops    SandboxOps
	socket *LendSocket
	log    hclog.Logger

	mu      sync.Mutex
	refused bool // the socket could not be opened: lend nothing
}

// tokenBytes is a token's length: 256 random bits.
const tokenBytes = 32

func newLender(ops SandboxOps, log hclog.Logger) *lender {
	return &lender{ops: ops, log: log, socket: NewLendSocket(context.Background(), frames.BackendLentSocket, true, log)}
}

// lend leases sandbox id until release. A lender that cannot open its
// socket lends nothing and answers the zero Lease: the host then relays the
// env's calls itself, as it does for a backend that does not lend.
func (l *lender) lend(id string, defaultTimeout time.Duration) (Lease, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refused {
		return Lease{}, nil
	}
	tok := make([]byte, tokenBytes)
	if _, err := rand.Read(tok); err != nil {
		return Lease{}, fmt.Errorf("lend sandbox %s: %w", id, err)
	}
	loan, err := l.socket.Lend(&Counted{Bound: Bound{Backend: l.ops, SandboxID: id, DefaultTimeout: defaultTimeout}}, tok)
	if errors.Is(err, errNoSocket) {
		l.refused = true
		l.log.Warn("the host will relay environments' calls", "error", err)
		return Lease{}, nil
	}
	if err != nil {
		return Lease{}, err
	}
	return NewLease(loan.Socket(), tok), nil
}

// release ends the lease of sandbox id, if it has one (see Loan.Release),
// and returns what was done through it.
func (l *lender) release(ctx context.Context, id string) (LeaseUse, bool) {
	sb, ok := l.socket.ReleaseID(ctx, id)
	if !ok {
		return LeaseUse{}, false
	}
	return sb.(*Counted).Use(), true
}

// close ends every lease and the socket; nothing is lent after.
func (l *lender) close() { l.socket.Close() }
