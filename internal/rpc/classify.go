package rpc

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"time"

	rpccode "google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/hermes-agent/hermes/internal/errclass"
)

// classes maps each error class to its code and the message a caller gets when the error
// carries none of its own (raw backend text never reaches a reply).
var classes = []struct {
	class error
	code  codes.Code
	msg   string
}{
	{errclass.Unavailable, codes.Unavailable, "a backend is unavailable; retry later"},
	{errclass.NotFound, codes.NotFound, "not found"},
	{errclass.Conflict, codes.Aborted, "a concurrent change won; read again and retry"},
	{errclass.Exists, codes.AlreadyExists, "already exists"},
	{errclass.Precondition, codes.FailedPrecondition, "the request cannot work in the current state"},
	{errclass.Invalid, codes.InvalidArgument, "invalid request"},
	{errclass.Exhausted, codes.ResourceExhausted, "a limit was reached"},
	{errclass.Denied, codes.PermissionDenied, "permission denied"},
}

// Classify turns any error into the status a caller gets: context errors become CANCELLED or
// DEADLINE_EXCEEDED, classified errors (internal/errclass) their code with their public message
// (errclass.Publisher), statuses pass through, and anything else is INTERNAL — a bug, never
// retried by clients, whose text is logged and not sent.
func Classify(ctx context.Context, log *slog.Logger, method string, err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "request cancelled")
	case errors.Is(err, io.EOF) && !classified(err):
		// A bare io.EOF: a stream's client went away while the handler was sending. A classified
		// one is a backend's connection closed under a command (Redis killed mid-call): its class.
		return status.Error(codes.Canceled, "request cancelled")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "deadline exceeded")
	}
	for _, c := range classes {
		if !errors.Is(err, c.class) {
			continue
		}
		msg := c.msg
		var e errclass.Publisher
		if errors.As(err, &e) && e.Public() != "" {
			msg = e.Public()
		}
		if c.code == codes.Unavailable && log != nil {
			log.WarnContext(ctx, "backend unavailable", "method", method, "error", err)
		}
		st := status.New(c.code, msg)
		var r errclass.Retrier
		if errors.As(err, &r) && r.RetryAfter() > 0 {
			if d, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(r.RetryAfter())}); derr == nil {
				st = d
			}
		}
		return st.Err()
	}
	// A status checked after the classes: a backend's gRPC status (Qdrant's) marked by its store
	// is the class's, not the backend's code and text.
	if _, ok := status.FromError(err); ok {
		return err
	}
	if log != nil {
		log.ErrorContext(ctx, "unclassified error", "method", method, "error", err)
	}
	return internalError(method)
}

// classified reports whether err is of one of the classes.
func classified(err error) bool {
	for _, c := range classes {
		if errors.Is(err, c.class) {
			return true
		}
	}
	return false
}

// internalError is the reply to a bug (an unclassified error, a panic): INTERNAL, its cause
// logged and not sent.
func internalError(method string) error {
	return status.Errorf(codes.Internal, "internal error in %s; the server logged the details", method)
}

// classifyUnary applies Classify to every handler's error.
func classifyUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		return resp, Classify(ctx, log, info.FullMethod, err)
	}
}

func classifyStream(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return Classify(ss.Context(), log, info.FullMethod, handler(srv, ss))
	}
}

// CodeName is a code's name as gRPC's own definitions spell it (CANCELLED, DEADLINE_EXCEEDED;
// Go's codes package writes Canceled), for events and records that show codes to people.
func CodeName(c codes.Code) string { return rpccode.Code(c).String() }

// RetryDelay is the google.rpc.RetryInfo delay that err carries, or 0.
func RetryDelay(err error) time.Duration {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return 0
}
