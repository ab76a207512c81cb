// Package retry holds the pieces every client of a remote API repeats when
// it retries: reading a server's Retry-After, the exponential ceiling of
// full-jitter backoff, the jitter itself, and a sleep that ends with its
// context.
//
// It also names the one transport failure that retrying rarely mends
// (Unreachable: nothing listens there, or the host does not exist), so
// every client tells it apart from a server that asks to try again.
//
// It deliberately has no retry loop: which failures are worth repeating,
// and what to do between attempts (adopt a half-made sandbox, re-read a
// header), belongs to each client.
package retry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
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

// Unreachable says whether err means the service is not there: the
// connection was refused (nothing listens on the port), the host name
// does not resolve, or no route leads to the host. Unlike a 503, a 429 or
// a connection dropped mid-answer, such a failure says nothing about
// trying again soon, so a check before a run fails on it at once. cause
// is a short account for messages ("connection refused: nothing listens
// at 127.0.0.1:9"),
// without the request's URL.
func Unreachable(err error) (cause string, ok bool) {
	if err == nil {
		return "", false
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		return fmt.Sprintf("host %s not found (DNS lookup failed)", dnsErr.Name), true
	}
	at := ""
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Addr != nil {
		at = " at " + opErr.Addr.String()
	}
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused: nothing listens" + at, true
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "no route to the host" + at, true
	}
	return "", false
}
