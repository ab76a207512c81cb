// Package duration is the one grammar for durations in rlhost's settings:
// every HCL attribute that takes a time (the host's own blocks, the policy
// block, every env and backend plugin) reads it with Parse, so one value is
// accepted or rejected the same way everywhere, with the same message.
//
// The grammar: Go's duration syntax ("500ms", "30s", "1m30s", "2h"), or a
// bare non-negative number, which means seconds ("30", "0.5"). Negative,
// non-finite and absurdly long values are errors. It deliberately knows no
// calendar units (days, months) and no locale.
package duration

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Max is the longest accepted duration. It keeps every accepted value far
// from overflow when callers add to it (a deadline, a TTL plus a margin).
const Max = 100 * 365 * 24 * time.Hour

// Examples is what error messages and docs offer as valid input.
const Examples = `500ms, 30s, 5m, 1h30m, or a bare number of seconds such as 30`

// Error is a value Parse rejects. Its text is the same for every setting.
type Error struct {
	Input  string
	Reason string // what is wrong: "not a duration", "negative", ...
}

func (e *Error) Error() string {
	return fmt.Sprintf("invalid duration %q (%s): want e.g. %s", e.Input, e.Reason, Examples)
}

// Parse reads s in the grammar above. Zero is allowed; use Positive where
// zero makes no sense.
func Parse(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, &Error{Input: s, Reason: "empty"}
	}
	var d time.Duration
	if f, err := strconv.ParseFloat(t, 64); err == nil {
		switch {
		case math.IsNaN(f) || math.IsInf(f, 0):
			return 0, &Error{Input: s, Reason: "not a number"}
		case f < 0:
			return 0, &Error{Input: s, Reason: "negative"}
		case f*float64(time.Second) > float64(Max):
			return 0, &Error{Input: s, Reason: "longer than 100 years"}
		}
		d = time.Duration(f * float64(time.Second))
	} else {
		v, err := time.ParseDuration(t)
		switch {
		case err != nil:
			return 0, &Error{Input: s, Reason: "not a duration"}
		case v < 0:
			return 0, &Error{Input: s, Reason: "negative"}
		case v > Max:
			return 0, &Error{Input: s, Reason: "longer than 100 years"}
		}
		d = v
	}
	return d, nil
}

// Positive is Parse, rejecting zero: for timeouts and intervals, where zero
// would mean "expire at once".
func Positive(s string) (time.Duration, error) {
	d, err := Parse(s)
	if err != nil {
		return 0, err
	}
	if d <= 0 {
		return 0, &Error{Input: s, Reason: "must be more than zero"}
	}
	return d, nil
}

// PositiveOr is Positive, except that an empty s (an optional setting left
// unset) gives def.
func PositiveOr(s string, def time.Duration) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	return Positive(s)
}

// Flag is a command-line flag in this grammar, so `--timeout 30` means
// what `timeout = "30"` means in a job file. It satisfies flag.Value and
// pflag.Value.
type Flag time.Duration

// Set parses s.
func (f *Flag) Set(s string) error {
	d, err := Parse(s)
	if err != nil {
		return err
	}
	*f = Flag(d)
	return nil
}

// String prints the value in Go's syntax, which Parse reads back; unset
// is "0", which flag packages know as "no default".
func (f *Flag) String() string {
	if f == nil || *f == 0 {
		return "0"
	}
	return time.Duration(*f).String()
}

// Type names the value in usage text.
func (f *Flag) Type() string { return "duration" }
