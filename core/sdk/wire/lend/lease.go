package lend

import (
	"context"
	"time"

	"github.com/rlhost/rlhost/core"
)

// Lease is a sandbox its backend lends itself: the backend's socket, and
// the token each call on it must carry. The token is the whole authority
// over the sandbox there until it is destroyed: hand it to one episode,
// and never log it. It is kept out of reach of printing and encoding: fmt
// shows an address where the token is, even in a struct that holds a
// Lease, and encoding/json (hclog's JSON format) leaves it out. The zero
// Lease is no lease.
type Lease struct {
	Socket string
	// A closure: reflection, and so fmt, sees only an address.
	token func() []byte
}

// NewLease is the lease of the sandbox served on socket to calls carrying
// token.
func NewLease(socket string, token []byte) Lease {
	return Lease{Socket: socket, token: func() []byte { return token }}
}

// Token is what each call on the lease must carry; nil for no lease.
func (l Lease) Token() []byte {
	if l.token == nil {
		return nil
	}
	return l.token()
}

// String names the lease without its token.
func (l Lease) String() string {
	if l.Socket == "" {
		return "no lease"
	}
	return "lease on " + l.Socket
}

// GoString is String, for %#v.
func (l Lease) GoString() string { return l.String() }

// Leased is a sandbox that may carry its backend's lease, as the host
// hands it to an environment client: one whose lease is not zero sends
// the environment to the backend's socket.
type Leased interface {
	core.Sandbox
	Lease() Lease
}

// Lender is a backend that lends its sandboxes to environments itself, on
// a socket of its own, so an environment's calls reach it without the host
// relaying them. The sandbox plugin client is one; the runner uses it when
// the backend it is given is one.
type Lender interface {
	// CreateLent is Create, asking the backend to lend the new sandbox;
	// defaultTimeout goes into each lent exec that names none. A backend
	// that does not lend its sandboxes answers the zero Lease.
	CreateLent(ctx context.Context, spec core.SandboxSpec, defaultTimeout time.Duration) (core.SandboxInfo, Lease, error)
	// DestroyLent is Destroy, and returns what was done through the
	// sandbox's lease, which ends first (cutting off its running calls).
	DestroyLent(ctx context.Context, id string) (Usage, error)
}

// lifecycle is a backend's Create and Destroy.
type lifecycle interface {
	Create(ctx context.Context, spec core.SandboxSpec) (core.SandboxInfo, error)
	Destroy(ctx context.Context, id string) error
}

// LenderOf is b as a Lender: b itself when it is one, else one that lends
// nothing (the zero Lease, and no use at destroy).
func LenderOf(b lifecycle) Lender {
	if l, ok := b.(Lender); ok {
		return l
	}
	return noLender{b}
}

type noLender struct{ lifecycle }

func (n noLender) CreateLent(ctx context.Context, spec core.SandboxSpec, _ time.Duration) (core.SandboxInfo, Lease, error) {
	info, err := n.Create(ctx, spec)
	return info, Lease{}, err
}

func (n noLender) DestroyLent(ctx context.Context, id string) (Usage, error) {
	return Usage{}, n.Destroy(ctx, id)
}
