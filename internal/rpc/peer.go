package rpc

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/errclass"
)

// ClassOf reads a callee's error back into the meaning Classify gave it, so a caller acts on
// another service's answer by class, not by code: the internal/errclass class of its code (the
// inverse of Classify's table: UNAVAILABLE is errclass.Unavailable…), context.Canceled or
// context.DeadlineExceeded, or nil for no error and for a code no class has (INTERNAL, UNKNOWN,
// UNAUTHENTICATED…: a fault the caller cannot act on). UNIMPLEMENTED reads as
// errclass.Precondition: the callee does not serve the method where it was called, and the same
// call will not work by retrying it. An error that has a class already (one made on this side
// of the call) is of that class.
func ClassOf(err error) error {
	if err == nil {
		return nil
	}
	for _, c := range classes {
		if errors.Is(err, c.class) {
			return c.class
		}
	}
	switch code := status.Code(err); {
	case code == codes.Canceled || errors.Is(err, context.Canceled):
		return context.Canceled
	case code == codes.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded):
		return context.DeadlineExceeded
	case code == codes.Unimplemented:
		return errclass.Precondition
	default:
		for _, c := range classes {
			if c.code == code {
				return c.class
			}
		}
	}
	return nil
}
