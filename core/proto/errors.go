package rlhostpb

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rlhost/rlhost/core"
)

// Sentinel errors travel as gRPC codes so that errors.Is keeps working on
// the far side of a plugin boundary.
var codeOf = []struct {
	err  error
	code codes.Code
}{
	{core.ErrNotFound, codes.NotFound},
	{core.ErrInvalidPath, codes.PermissionDenied},
	{core.ErrTooLarge, codes.OutOfRange},
	{core.ErrLimitReached, codes.ResourceExhausted},
	{core.ErrUnimplemented, codes.Unimplemented},
	{core.ErrUnavailable, codes.Unavailable},
	{context.Canceled, codes.Canceled},
	{context.DeadlineExceeded, codes.DeadlineExceeded},
}

// ToStatus converts a plugin-side error into a gRPC status error.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok && !isSentinelWrapped(err) {
		return err
	}
	for _, c := range codeOf {
		if errors.Is(err, c.err) {
			return status.Error(c.code, err.Error())
		}
	}
	return status.Error(codes.Unknown, err.Error())
}

func isSentinelWrapped(err error) bool {
	for _, c := range codeOf {
		if errors.Is(err, c.err) {
			return true
		}
	}
	return false
}

// FromStatus converts a gRPC error back into an error that wraps the matching
// core sentinel, keeping the remote message.
func FromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, c := range codeOf {
		if st.Code() == c.code {
			if st.Code() == codes.Unavailable {
				return fmt.Errorf("%w: %s", core.ErrUnavailable, st.Message())
			}
			return &remoteError{msg: st.Message(), sentinel: c.err}
		}
	}
	return errors.New(st.Message())
}

// remoteError keeps the plugin's message verbatim (it already names the
// sentinel's text) while still matching the sentinel with errors.Is.
type remoteError struct {
	msg      string
	sentinel error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.sentinel }
