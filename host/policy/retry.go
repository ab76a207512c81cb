package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rlhost/rlhost/core/retry"
)

// maxRetryAfter bounds how long a server's Retry-After can park a request,
// so a misconfigured proxy asking for hours does not hang the run.
const maxRetryAfter = 5 * time.Minute

// errClass is what a failed attempt means for the next one.
type errClass int

const (
	retryable errClass = iota
	contextLength
	permanent
)

// apiFailure extracts the HTTP status and the server's message from a
// go-openai error; status 0 means the request never got an HTTP answer.
func apiFailure(err error) (status int, code, msg string) {
	var reqErr *openai.RequestError
	var apiErr *openai.APIError
	switch {
	case errors.As(err, &reqErr):
		// The body was not OpenAI's {"error": ...} shape (e.g. older vLLM).
		return reqErr.HTTPStatusCode, "", string(reqErr.Body)
	case errors.As(err, &apiErr):
		if s, ok := apiErr.Code.(string); ok {
			code = s
		}
		return apiErr.HTTPStatusCode, code, apiErr.Message
	}
	return 0, "", ""
}

// classify decides whether a failed attempt is worth repeating. Rate limits,
// server errors, transport failures and truncated replies are; a
// context-length complaint, other client errors and go-openai's own request
// validation (which never reaches the server) are not.
func classify(err error) errClass {
	if errors.Is(err, errServerOut) {
		return retryable
	}
	status, code, msg := apiFailure(err)
	if status == 0 {
		var urlErr *url.Error
		var syntaxErr *json.SyntaxError
		if errors.As(err, &urlErr) || errors.As(err, &syntaxErr) ||
			errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return retryable
		}
		return permanent
	}
	switch {
	case status == http.StatusRequestTimeout,
		status == http.StatusConflict,
		status == http.StatusTooManyRequests,
		status >= 500:
		return retryable
	case code == "context_length_exceeded",
		strings.Contains(strings.ToLower(msg), "context length"),
		strings.Contains(msg, "context_length_exceeded"):
		return contextLength
	}
	return permanent
}

// backoffCeiling is base*2^attempt capped at max.
func backoffCeiling(attempt int, base, max time.Duration) time.Duration {
	return retry.Ceiling(attempt, base, max)
}

// parseRetryAfter reads a Retry-After header: delay-seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	return retry.After(v, now, maxRetryAfter)
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error { return retry.Sleep(ctx, d) }

// describe renders a server failure without the request, which may carry
// prompts (and never carries the key: go-openai keeps it in headers only).
func describe(err error) string {
	status, code, msg := apiFailure(err)
	if status == 0 {
		// The caller's message names the URL already; go-openai's
		// transport error would repeat it.
		var urlErr *url.Error
		if errors.As(err, &urlErr) {
			return urlErr.Err.Error()
		}
		return err.Error()
	}
	if code != "" {
		return fmt.Sprintf("HTTP %d %s: %s", status, code, msg)
	}
	return fmt.Sprintf("HTTP %d: %s", status, msg)
}

// serverError is a failure the server reported, printed as describe does,
// which keeps go-openai's error reachable with errors.As.
type serverError struct{ err error }

func (e serverError) Error() string { return describe(e.err) }
func (e serverError) Unwrap() error { return e.err }
