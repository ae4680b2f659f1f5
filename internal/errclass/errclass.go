// Package errclass is Hermes' one error taxonomy. Code anywhere below the gRPC boundary marks an
// error with the class a caller can act on — a backend is unavailable, a thing is not found, a
// request is invalid… — and keeps its cause for the logs; internal/rpc maps the class to a gRPC
// status once, at the boundary, for every service. An error without a class is a bug: INTERNAL,
// never retried, its text kept out of the reply.
package errclass

import (
	"errors"
	"fmt"
	"time"
)

// The classes. Each is a sentinel: mark an error with New or by wrapping the sentinel
// (fmt.Errorf("redis: %w: %w", errclass.Unavailable, err)), test it with errors.Is.
var (
	// Unavailable: a backend (Redis, bbolt's lock, Qdrant, NATS, a model, another service) did
	// not answer; the same request may succeed later (UNAVAILABLE, retried by clients).
	Unavailable = errors.New("unavailable")
	// NotFound: what the request names does not exist (NOT_FOUND).
	NotFound = errors.New("not found")
	// Conflict: the request lost a race with another writer or a concurrent run; reread and
	// retry (ABORTED).
	Conflict = errors.New("conflict")
	// Exists: what the request creates exists already (ALREADY_EXISTS).
	Exists = errors.New("already exists")
	// Precondition: the system is not in a state where the request can work, and will not be
	// by retrying it as is (FAILED_PRECONDITION).
	Precondition = errors.New("failed precondition")
	// Invalid: the request itself is wrong (INVALID_ARGUMENT).
	Invalid = errors.New("invalid")
	// Exhausted: a size, count or rate limit was reached (RESOURCE_EXHAUSTED).
	Exhausted = errors.New("exhausted")
	// Denied: the caller may not do this (PERMISSION_DENIED).
	Denied = errors.New("permission denied")
)

// Errorf is New with a formatted message and no cause, for an error whose whole text is for the
// caller ("no server named %q").
func Errorf(class error, format string, args ...any) error {
	return &Error{class: class, msg: fmt.Sprintf(format, args...)}
}

// Mark returns cause marked with class and prefixed with op (what was being done), for the
// places where a backend's error enters Hermes: errclass.Mark(errclass.Unavailable, "redis get",
// err). The caller sees the class; op and the cause stay in the logs. A nil cause is nil, so a
// call's error can be marked as it is returned.
func Mark(class error, op string, cause error) error {
	if cause == nil {
		return nil
	}
	return fmt.Errorf("%s: %w: %w", op, class, cause)
}

// Publisher is an error that carries the message a caller can act on, apart from its cause:
// *Error, or a domain error type with details of its own (a conflict's sequence numbers).
type Publisher interface {
	error
	Public() string
}

// Error is an error of a class with the message a caller can act on; the cause stays in the logs.
type Error struct {
	class error
	msg   string
	cause error
}

// New returns an error of class with msg for the caller and cause for the logs (may be nil).
func New(class error, msg string, cause error) error {
	return &Error{class: class, msg: msg, cause: cause}
}

// Error is the message with its cause.
func (e *Error) Error() string {
	if e.cause == nil {
		return e.msg
	}
	return e.msg + ": " + e.cause.Error()
}

// Public is the message for the caller, without the cause.
func (e *Error) Public() string { return e.msg }

// Is reports the class.
func (e *Error) Is(target error) bool { return target == e.class }

// Unwrap is the cause.
func (e *Error) Unwrap() error { return e.cause }

// Retrier is an error that knows when the same request may succeed (a rate or quota limit); the
// gRPC boundary sends the delay as google.rpc.RetryInfo, the HTTP API as Retry-After.
type Retrier interface {
	error
	RetryAfter() time.Duration
}
