package daytona

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	sdkerrors "github.com/daytonaio/daytona/libs/sdk-go/pkg/errors"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/retry"
)

// ErrAuth means Daytona rejected the credentials (HTTP 401 or 403).
var ErrAuth = errors.New("daytona rejected the API key")

// Backoff bounds. Retry-After from the server wins over the computed delay
// but is itself capped, so a bad header cannot park a run for an hour.
const (
	backoffBase     = 250 * time.Millisecond
	backoffMax      = 8 * time.Second
	retryAfterLimit = 60 * time.Second
)

// apiStatus extracts the HTTP status and headers from an SDK error; status
// 0 means no response (network error, timeout).
func apiStatus(err error) (int, http.Header) {
	var nf *sdkerrors.DaytonaNotFoundError
	var rl *sdkerrors.DaytonaRateLimitError
	var to *sdkerrors.DaytonaTimeoutError
	var de *sdkerrors.DaytonaError
	switch {
	case errors.As(err, &nf):
		return http.StatusNotFound, nf.Headers
	case errors.As(err, &rl):
		return http.StatusTooManyRequests, rl.Headers
	case errors.As(err, &to):
		return 0, nil
	case errors.As(err, &de):
		return de.StatusCode, de.Headers
	}
	return 0, nil
}

// retryable says whether a failed call may be repeated: 429, 5xx (not 501)
// and failures without a response, as long as the caller's context lives.
func retryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	st, _ := apiStatus(err)
	return st == http.StatusTooManyRequests || (st >= 500 && st != http.StatusNotImplemented) || st == 0
}

// backoff is the delay before retry number attempt (0-based): full jitter
// over an exponential ceiling, unless the server said how long to wait.
func backoff(attempt int, h http.Header, now time.Time, rnd func(time.Duration) time.Duration) time.Duration {
	if d, ok := retry.After(h.Get("Retry-After"), now, retryAfterLimit); ok {
		// A little jitter on top so a burst of clients told the same
		// Retry-After does not come back in the same millisecond.
		return d + rnd(backoffBase)
	}
	return rnd(retry.Ceiling(attempt, backoffBase, backoffMax))
}

// callOpts tune one retried call.
type callOpts struct {
	timeout time.Duration // per attempt; 0 = none beyond ctx
	retries int
	// retryIf narrows which failures are retried; nil = retryable.
	retryIf func(ctx context.Context, err error) bool
	// beforeRetry runs before each retry; returning done=true ends the
	// loop with err (used by create to adopt a sandbox whose create
	// response was lost).
	beforeRetry func(ctx context.Context, err error) (done bool, out error)
}

// retry runs op until it succeeds, fails for good, or retries run out, and
// maps the last error onto rlhost's error kinds.
func withRetry(ctx context.Context, what string, o callOpts, op func(ctx context.Context) error) error {
	can := o.retryIf
	if can == nil {
		can = retryable
	}
	var err error
	for attempt := 0; ; attempt++ {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if o.timeout > 0 {
			actx, cancel = context.WithTimeout(ctx, o.timeout)
		}
		err = op(actx)
		cancel()
		if err == nil {
			return nil
		}
		if attempt >= o.retries || !can(ctx, err) {
			break
		}
		_, h := apiStatus(err)
		if serr := retry.Sleep(ctx, backoff(attempt, h, time.Now(), retry.Jitter)); serr != nil {
			break
		}
		if o.beforeRetry != nil {
			if done, out := o.beforeRetry(ctx, err); done {
				return out
			}
		}
	}
	return classify(what, err)
}

// classify wraps an SDK error so errors.Is works with rlhost's kinds.
func classify(what string, err error) error {
	if err == nil {
		return nil
	}
	st, _ := apiStatus(err)
	switch {
	case st == http.StatusUnauthorized || st == http.StatusForbidden:
		return fmt.Errorf("daytona %s: %w (HTTP %d; check $%s or api_key): %w", what, ErrAuth, st, apiKeyEnv, err)
	case st == http.StatusNotFound:
		return fmt.Errorf("daytona %s: %w: %w", what, core.ErrNotFound, err)
	case st == http.StatusTooManyRequests || st >= 500 || st == 0:
		return fmt.Errorf("daytona %s: %w: %w", what, core.ErrUnavailable, err)
	}
	return fmt.Errorf("daytona %s: %w", what, err)
}
