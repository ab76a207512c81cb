package aviato

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/retry"
)

// errAuth marks calls the service refused for their credentials.
var errAuth = errors.New("Aviato rejected the credentials (check CWSANDBOX_API_KEY or api_key)")

const (
	backoffBase = 200 * time.Millisecond
	backoffMax  = 5 * time.Second
)

// retryable says whether a failed call may be repeated: the service was
// unavailable or over quota. The client itself retries nothing; these are
// the codes its error translation treats as transient.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.ResourceExhausted:
		return true
	}
	return false
}

// call runs op with a per-attempt timeout until it succeeds, fails for
// good, or retries run out, and maps the last error onto rlhost's kinds.
func (b *Backend) call(ctx context.Context, what string, retries int, op func(ctx context.Context) error) error {
	var err error
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, b.set.apiTimeout)
		err = op(actx)
		cancel()
		if err == nil || !retryable(err) || attempt >= retries || ctx.Err() != nil {
			break
		}
		if err := retry.Sleep(ctx, retry.Jitter(retry.Ceiling(attempt, backoffBase, backoffMax))+time.Millisecond); err != nil {
			return classify(what, err)
		}
	}
	return classify(what, err)
}

// classify wraps a gRPC error so errors.Is works with rlhost's kinds.
func classify(what string, err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("aviato %s: %w", what, err)
	}
	msg := st.Message()
	switch st.Code() {
	case codes.NotFound:
		return fmt.Errorf("aviato %s: %s: %w", what, msg, core.ErrNotFound)
	case codes.ResourceExhausted:
		return fmt.Errorf("aviato %s: %s: %w", what, msg, core.ErrLimitReached)
	case codes.Unauthenticated, codes.PermissionDenied:
		return fmt.Errorf("aviato %s: %w: %s", what, errAuth, msg)
	case codes.DeadlineExceeded:
		return fmt.Errorf("aviato %s: %s: %w", what, msg, context.DeadlineExceeded)
	case codes.Canceled:
		return fmt.Errorf("aviato %s: %s: %w", what, msg, context.Canceled)
	case codes.Unavailable:
		return fmt.Errorf("aviato %s: service unavailable: %s", what, msg)
	}
	return fmt.Errorf("aviato %s: %s (%s)", what, msg, st.Code())
}
