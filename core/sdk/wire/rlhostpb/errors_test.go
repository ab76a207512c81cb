package rlhostpb

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rlhost/rlhost/core"
)

func TestSentinelsRoundTrip(t *testing.T) {
	for _, s := range []error{core.ErrNotFound, core.ErrInvalidPath, core.ErrTooLarge, core.ErrLimitReached, core.ErrUnimplemented, core.ErrUnavailable, context.Canceled, context.DeadlineExceeded} {
		wrapped := fmt.Errorf("read x in sandbox y: %w", s)
		back := FromStatus(ToStatus(wrapped))
		if !errors.Is(back, s) {
			t.Errorf("%v: identity lost across the boundary: %v", s, back)
		}
		if back.Error() != wrapped.Error() && s != core.ErrUnavailable {
			t.Errorf("%v: message changed: %q", s, back.Error())
		}
	}
	// A transport-made status with a code we also use must not read as a sentinel.
	transport := status.Error(codes.ResourceExhausted, "grpc: received message larger than max")
	if back := FromStatus(transport); errors.Is(back, core.ErrLimitReached) {
		t.Errorf("a transport ResourceExhausted became ErrLimitReached: %v", back)
	}
	// A broken connection still reads as unavailable, which crash detection uses.
	if back := FromStatus(status.Error(codes.Unavailable, "connection reset")); !errors.Is(back, core.ErrUnavailable) {
		t.Errorf("transport Unavailable lost: %v", back)
	}
	plain := errors.New("boom")
	if back := FromStatus(ToStatus(plain)); back.Error() != "boom" || errors.Is(back, core.ErrNotFound) {
		t.Errorf("plain error: %v", back)
	}
}

// A LentError carries what a status does: the same kinds survive it.
func TestLentErrorRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		err  error
		is   error
	}{
		{"not found", fmt.Errorf("x: %w", core.ErrNotFound), core.ErrNotFound},
		{"invalid path", fmt.Errorf("x: %w", core.ErrInvalidPath), core.ErrInvalidPath},
		{"too large", fmt.Errorf("x: %w", core.ErrTooLarge), core.ErrTooLarge},
		{"limit", fmt.Errorf("x: %w", core.ErrLimitReached), core.ErrLimitReached},
		{"unimplemented", fmt.Errorf("x: %w", core.ErrUnimplemented), core.ErrUnimplemented},
		{"unavailable", fmt.Errorf("x: %w", core.ErrUnavailable), core.ErrUnavailable},
		{"cancelled", fmt.Errorf("x: %w", context.Canceled), context.Canceled},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), context.DeadlineExceeded},
		{"plain", errors.New("boom"), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := ToLentError(tc.err)
			if want := status.Code(ToStatus(tc.err)); codes.Code(e.GetCode()) != want {
				t.Fatalf("code %d, want %v as ToStatus gives", e.GetCode(), want)
			}
			back := FromLentError(e)
			if tc.is != nil && !errors.Is(back, tc.is) {
				t.Fatalf("identity lost: %v", back)
			}
			if tc.is == nil && (errors.Is(back, core.ErrNotFound) || back.Error() != tc.err.Error()) {
				t.Fatalf("plain error came back as %v", back)
			}
		})
	}
	// A LentError with no code (a peer that forgot it) is still an error.
	if err := FromLentError(&LentError{Message: "m"}); err == nil {
		t.Fatal("a LentError without a code read as success")
	}
}
