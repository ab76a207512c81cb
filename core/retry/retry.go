// Package retry holds the pieces every client of a remote API repeats when
// it retries: reading a server's Retry-After, the exponential ceiling of
// full-jitter backoff, the jitter itself, and a sleep that ends with its
// context.
//
// It deliberately has no retry loop: which failures are worth repeating,
// and what to do between attempts (adopt a half-made sandbox, re-read a
// header), belongs to each client.
package retry

import (
	"context"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// After reads a Retry-After value in either of its forms: delay-seconds
// ("120", or with a fraction, "1.5", which some servers send) or an
// HTTP-date ("Wed, 21 Oct 2015 07:28:00 GMT", counted from now; a date
// already past means no wait). The delay is capped at limit, so a
// misconfigured server cannot park a caller for hours. ok is false for an
// empty, negative or unreadable value.
func After(v string, now time.Time, limit time.Duration) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if isDecimal(v) {
		secs, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, false
		}
		// Compared before converting: a huge value would overflow Duration.
		if secs >= limit.Seconds() {
			return limit, true
		}
		return time.Duration(secs * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(t.Sub(now), 0), limit), true
	}
	return 0, false
}

// isDecimal says whether v is digits with at most one '.', and at least one
// digit: the delay-seconds form. ParseFloat alone would also take "NaN",
// "Inf", "1e3", "0x10" and signs.
func isDecimal(v string) bool {
	digits, dots := 0, 0
	for _, r := range v {
		switch {
		case r >= '0' && r <= '9':
			digits++
		case r == '.':
			dots++
		default:
			return false
		}
	}
	return digits > 0 && dots <= 1
}

// Ceiling is base*2^attempt capped at limit: the upper bound of the
// full-jitter delay before retry number attempt (0-based).
func Ceiling(attempt int, base, limit time.Duration) time.Duration {
	d := base
	for range attempt {
		if d >= limit/2 {
			return limit
		}
		d *= 2
	}
	return min(d, limit)
}

// Jitter is uniform in [0, d]; 0 for d <= 0.
func Jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(d) + 1))
}

// Sleep waits d, or until ctx ends and then returns its error.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
