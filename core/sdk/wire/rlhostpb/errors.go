package rlhostpb

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rlhost/rlhost/core"
)

// errorDomain marks the ErrorInfo detail that names an rlhost sentinel.
const errorDomain = "rlhost.dev"

// Sentinel errors cross a plugin boundary as a status code plus an ErrorInfo
// detail naming the sentinel. The detail, not the code, carries identity:
// gRPC itself produces ResourceExhausted or Unavailable for transport
// problems, which must not read as "sandbox limit reached".
var sentinels = []struct {
	err    error
	reason string
	code   codes.Code
}{
	{core.ErrNotFound, "NOT_FOUND", codes.NotFound},
	{core.ErrInvalidPath, "INVALID_PATH", codes.PermissionDenied},
	{core.ErrTooLarge, "TOO_LARGE", codes.OutOfRange},
	{core.ErrLimitReached, "LIMIT_REACHED", codes.ResourceExhausted},
	{core.ErrUnimplemented, "UNIMPLEMENTED", codes.Unimplemented},
	{core.ErrUnavailable, "UNAVAILABLE", codes.Unavailable},
}

// ToStatus converts a plugin-side error into a gRPC status error.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			st := status.New(s.code, err.Error())
			if withInfo, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: s.reason, Domain: errorDomain}); derr == nil {
				st = withInfo
			}
			return st.Err()
		}
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codes.Unknown, err.Error())
}

// FromStatus converts a gRPC error back into an error that wraps the matching
// core sentinel (or context error), keeping the remote message.
func FromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.GetDomain() != errorDomain {
			continue
		}
		for _, s := range sentinels {
			if s.reason == info.GetReason() {
				return &remoteError{msg: st.Message(), sentinel: s.err}
			}
		}
	}
	switch st.Code() {
	case codes.Canceled:
		return &remoteError{msg: st.Message(), sentinel: context.Canceled}
	case codes.DeadlineExceeded:
		return &remoteError{msg: st.Message(), sentinel: context.DeadlineExceeded}
	case codes.Unavailable:
		// The transport broke (typically: the plugin died). Not a sentinel a
		// plugin sent, but callers test for it to detect crashes.
		return fmt.Errorf("%w: %s", core.ErrUnavailable, st.Message())
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

// ToLentError converts an error into the LentError a lent-sandbox reply
// carries: the code, message and sentinel reason ToStatus would give it.
func ToLentError(err error) *LentError {
	st := status.Convert(ToStatus(err))
	e := &LentError{Code: int32(st.Code()), Message: st.Message()}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == errorDomain {
			e.Reason = info.GetReason()
		}
	}
	return e
}

// FromLentError converts a LentError back as FromStatus converts the status
// it stands for, so sentinels and context errors survive the wire.
func FromLentError(e *LentError) error {
	st := status.New(codes.Code(e.GetCode()), e.GetMessage())
	if e.GetReason() != "" {
		if withInfo, err := st.WithDetails(&errdetails.ErrorInfo{Reason: e.GetReason(), Domain: errorDomain}); err == nil {
			st = withInfo
		}
	}
	if st.Code() == codes.OK {
		// A reply must not read as success for lack of a code.
		st = status.New(codes.Unknown, e.GetMessage())
	}
	return FromStatus(st.Err())
}
