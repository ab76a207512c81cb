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
