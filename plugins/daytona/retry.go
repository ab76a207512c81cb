package daytona

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	sdkerrors "github.com/daytonaio/daytona/libs/sdk-go/pkg/errors"
	"github.com/hashicorp/go-hclog"

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
// and failures without a response, as long as the caller's context lives;
// not when the API cannot be reached at all (unreachable).
func retryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	st, _ := apiStatus(err)
	if st == 0 {
		_, gone := unreachable(err)
		return !gone
	}
	return st == http.StatusTooManyRequests || (st >= 500 && st != http.StatusNotImplemented)
}

// unreachable says whether err means the API is not there: no such host,
// connection refused, no route (retry.Unreachable). The SDK flattens a
// transport error into its message, so for its errors the text is read.
func unreachable(err error) (cause string, ok bool) {
	if cause, ok := retry.Unreachable(err); ok {
		return cause, true
	}
	var de *sdkerrors.DaytonaError
	if !errors.As(err, &de) || de.StatusCode != 0 {
		return "", false
	}
	for _, sign := range []string{"no such host", "connection refused", "no route to host", "network is unreachable"} {
		if strings.Contains(de.Message, sign) {
			return withoutURL(de.Message), true
		}
	}
	return "", false
}

// requestPrefix is how a Go HTTP client's error starts: the method and the
// quoted URL, which carries the whole query string.
var requestPrefix = regexp.MustCompile(`^[A-Z][a-z]+ "[^"]*": `)

// withoutURL drops the request's method and URL from a transport error's
// text; the caller's message already says which call failed.
func withoutURL(msg string) string { return requestPrefix.ReplaceAllString(msg, "") }

// transportErr is an error without an HTTP answer, printed without the
// request URL; errors.As still finds the original.
type transportErr struct {
	msg string
	err error
}

func (e transportErr) Error() string { return e.msg }
func (e transportErr) Unwrap() error { return e.err }

// shortTransport renders an error that got no HTTP answer without the URL.
func shortTransport(err error) error {
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		return transportErr{msg: urlErr.Err.Error(), err: err}
	}
	var de *sdkerrors.DaytonaError
	if errors.As(err, &de) && de.StatusCode == 0 {
		return transportErr{msg: withoutURL(de.Message), err: err}
	}
	return err
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
	// log announces each retry, so a slow call is not a silent one; nil
	// for none.
	log hclog.Logger
	// api is the API's URL, named when it cannot be reached.
	api string
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
		st, h := apiStatus(err)
		wait := backoff(attempt, h, time.Now(), retry.Jitter)
		if o.log != nil {
			why := fmt.Sprintf("HTTP %d", st)
			if st == 0 {
				why = shortTransport(err).Error()
			}
			o.log.Warn(fmt.Sprintf("daytona %s: %s; retry %d of %d in %s", what, why, attempt+1, o.retries, wait.Round(time.Millisecond)))
		}
		if serr := retry.Sleep(ctx, wait); serr != nil {
			break
		}
		if o.beforeRetry != nil {
			if done, out := o.beforeRetry(ctx, err); done {
				return out
			}
		}
	}
	if cause, ok := unreachable(err); ok && o.api != "" {
		return fmt.Errorf("daytona %s: %w: cannot reach the Daytona API at %s: %w", what, core.ErrUnavailable, o.api, transportErr{msg: cause, err: err})
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
	case st == 0:
		if cause, ok := unreachable(err); ok {
			return fmt.Errorf("daytona %s: %w: cannot reach the Daytona API: %w", what, core.ErrUnavailable, transportErr{msg: cause, err: err})
		}
		return fmt.Errorf("daytona %s: %w: %w", what, core.ErrUnavailable, shortTransport(err))
	case st == http.StatusTooManyRequests || st >= 500:
		return fmt.Errorf("daytona %s: %w: %w", what, core.ErrUnavailable, err)
	}
	return fmt.Errorf("daytona %s: %w", what, err)
}
