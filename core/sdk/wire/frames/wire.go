package frames

import (
	"google.golang.org/protobuf/proto"

	"github.com/rlhost/rlhost/core/sdk/wire/rlhostpb"
)

// Call is a wire's call message, as a pointer to T: it carries the id its
// caller chose, and may instead cancel the running call of that id.
type Call[T any] interface {
	*T
	proto.Message
	GetId() uint64
	SetId(uint64)
	IsCancel() bool
	SetCancel()
}

// Reply is a wire's reply message, as a pointer to T: it carries its call's
// id, and a result or the error the call failed with, as the gRPC status
// it would have been.
type Reply[T any] interface {
	*T
	proto.Message
	GetId() uint64
	SetId(uint64)
	GetError() *rlhostpb.LentError
	SetError(*rlhostpb.LentError)
}

// errorReply is a reply carrying err.
func errorReply[RT any, R Reply[RT]](err error) R {
	rep := R(new(RT))
	rep.SetError(rlhostpb.ToLentError(err))
	return rep
}
