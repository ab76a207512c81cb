package aviato

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rlhost/rlhost/core"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		code codes.Code
		is   error
		text string
	}{
		{codes.NotFound, core.ErrNotFound, "not found"},
		{codes.ResourceExhausted, core.ErrLimitReached, "quota"},
		{codes.Unauthenticated, errAuth, "rejected the credentials"},
		{codes.PermissionDenied, errAuth, "rejected the credentials"},
		{codes.DeadlineExceeded, context.DeadlineExceeded, "deadline"},
		{codes.Canceled, context.Canceled, "canceled"},
		{codes.Unavailable, nil, "service unavailable"},
		{codes.InvalidArgument, nil, "InvalidArgument"},
	} {
		err := classify("op", status.Error(tc.code, tc.text))
		if tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("%v: %v is not %v", tc.code, err, tc.is)
		}
		if errors.Is(err, core.ErrUnavailable) {
			t.Errorf("%v: %v reads as a crashed plugin", tc.code, err)
		}
		if !strings.Contains(err.Error(), tc.text) || !strings.HasPrefix(err.Error(), "aviato op") {
			t.Errorf("%v: message %q", tc.code, err)
		}
	}
}

func TestCallRetries(t *testing.T) {
	b := &Backend{set: settings{apiTimeout: time.Second}}
	for _, tc := range []struct {
		name    string
		fails   []codes.Code
		retries int
		calls   int
		ok      bool
	}{
		{"unavailable then ok", []codes.Code{codes.Unavailable, codes.Unavailable}, 3, 3, true},
		{"quota then ok", []codes.Code{codes.ResourceExhausted}, 3, 2, true},
		{"retries run out", []codes.Code{codes.Unavailable, codes.Unavailable, codes.Unavailable}, 2, 3, false},
		{"invalid argument is final", []codes.Code{codes.InvalidArgument}, 3, 1, false},
		{"not found is final", []codes.Code{codes.NotFound}, 3, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := b.call(context.Background(), "op", tc.retries, func(ctx context.Context) error {
				calls++
				if _, ok := ctx.Deadline(); !ok {
					t.Error("attempt without a deadline")
				}
				if calls <= len(tc.fails) {
					return status.Error(tc.fails[calls-1], "x")
				}
				return nil
			})
			if calls != tc.calls || (err == nil) != tc.ok {
				t.Errorf("%d calls, err %v; want %d calls, ok=%v", calls, err, tc.calls, tc.ok)
			}
		})
	}
}
