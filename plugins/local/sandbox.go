package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/plugins/local/sandboxinit"
)

// boxImpl is one sandbox's running machinery.
type boxImpl interface {
	exec(ctx context.Context, s sandboxinit.ExecSpec) (core.ExecResult, error)
	readFile(ctx context.Context, p string, max int64) ([]byte, error)
	writeFile(ctx context.Context, p string, data []byte, mode uint32, max int64) error
	list(ctx context.Context, p string) ([]core.FileInfo, error)
	alive() bool
	stop() error
}

type sandbox struct {
	meta  meta
	spec  core.SandboxSpec
	entry *entry
	impl  boxImpl
	ttl   *time.Timer

	once sync.Once
	err  error

	// The calls made on this use of the sandbox. A recycled sandbox keeps
	// its impl, so a call from its last user still on its way must not
	// reach its next one: the reset waits for every call to end, and no
	// call starts once the sandbox is being destroyed.
	callMu   sync.Mutex
	closing  bool
	calls    sync.WaitGroup
	callsCtx context.Context // ends when closing begins; nil until a call
	endCalls context.CancelFunc
}

// enter starts a call on the sandbox. It fails with ErrNotFound once the
// sandbox is being destroyed, and the call's context ends when that
// begins; done must be called when the call has returned.
func (sb *sandbox) enter(ctx context.Context) (cctx context.Context, done func(), err error) {
	sb.callMu.Lock()
	defer sb.callMu.Unlock()
	if sb.closing {
		return nil, nil, fmt.Errorf("local backend: sandbox %q: %w", sb.meta.ID, core.ErrNotFound)
	}
	if sb.callsCtx == nil {
		sb.callsCtx, sb.endCalls = context.WithCancel(context.Background())
	}
	sb.calls.Add(1)
	cctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(sb.callsCtx, cancel)
	return cctx, func() { stop(); cancel(); sb.calls.Done() }, nil
}

// close refuses new calls and cancels the running ones.
func (sb *sandbox) close() {
	sb.callMu.Lock()
	defer sb.callMu.Unlock()
	sb.closing = true
	if sb.endCalls != nil {
		sb.endCalls()
	}
}

// drained reports whether every call ended within d after close.
func (sb *sandbox) drained(d time.Duration) bool {
	done := make(chan struct{})
	go func() { sb.calls.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// newID is a fresh sandbox id: 64 random bits, in hex.
func newID() string {
	var r [8]byte
	rand.Read(r[:])
	return hex.EncodeToString(r[:])
}

// sameShape reports whether a sandbox made for spec can serve a Create of
// want: everything but the labels and the TTL, which adopt sets.
func sameShape(spec, want core.SandboxSpec) bool {
	a, c := spec, want
	a.Labels, c.Labels, a.TTL, c.TTL = nil, nil, 0, 0
	return reflect.DeepEqual(a, c)
}
