package core

import "errors"

// Errors that cross the plugin boundary keep their identity: the gRPC layer
// maps them to status codes and back, so errors.Is works on the host.
var (
	ErrNotFound      = errors.New("not found")
	ErrInvalidPath   = errors.New("path outside the sandbox workspace")
	ErrTooLarge      = errors.New("size limit exceeded")
	ErrUnavailable   = errors.New("unavailable")
	ErrLimitReached  = errors.New("sandbox limit reached")
	ErrUnimplemented = errors.New("not supported by this plugin")
)
