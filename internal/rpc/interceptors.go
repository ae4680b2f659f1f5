package rpc

import (
	"context"
	"log/slog"
	"runtime/debug"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/auth"
)

// recoverUnary turns a panic in a handler into an INTERNAL error and logs it with its stack, so
// one bad request never takes the process down.
func recoverUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if r := recover(); r != nil {
				err = panicError(ctx, log, info.FullMethod, r)
			}
		}()
		return handler(ctx, req)
	}
}

func recoverStream(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = panicError(ss.Context(), log, info.FullMethod, r)
			}
		}()
		return handler(srv, ss)
	}
}

func panicError(ctx context.Context, log *slog.Logger, method string, r any) error {
	log.ErrorContext(ctx, "panic in handler", "method", method, "panic", r, "stack", string(debug.Stack()))
	return internalError(method)
}

// logUnary logs every finished call: method, code, duration, peer and principal. Server faults
// are logged at error (or warn, for a backend that is down or slow) with their error; client
// errors — a bad request, a missing key, something that does not exist — are expected outcomes
// and logged at info with their detail; successes at debug.
func logUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		ctx, rec := auth.WithRecorder(ctx)
		resp, err := handler(ctx, req)
		logCall(ctx, log, info.FullMethod, start, rec, err)
		return resp, err
	}
}

func logStream(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		ctx, rec := auth.WithRecorder(ss.Context())
		err := handler(srv, &serverStream{ServerStream: ss, ctx: ctx})
		logCall(ctx, log, info.FullMethod, start, rec, err)
		return err
	}
}

func logCall(ctx context.Context, log *slog.Logger, method string, start time.Time, rec *auth.Recorder, err error) {
	code := status.Code(err)
	level := slog.LevelDebug
	switch code {
	case codes.OK:
	case codes.Internal, codes.Unknown, codes.DataLoss, codes.Unimplemented:
		level = slog.LevelError
	case codes.Unavailable, codes.DeadlineExceeded:
		level = slog.LevelWarn
	default:
		level = slog.LevelInfo
	}
	if !log.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("method", method),
		slog.String("code", code.String()),
		slog.Duration("duration", time.Since(start)),
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		attrs = append(attrs, slog.String("peer", p.Addr.String()))
	}
	if name := rec.Name(); name != "" {
		attrs = append(attrs, slog.String("principal", name))
	}
	if err != nil {
		key := "detail"
		if level >= slog.LevelWarn {
			key = "error"
		}
		attrs = append(attrs, slog.String(key, status.Convert(err).Message()))
	}
	log.LogAttrs(ctx, level, "rpc", attrs...)
}

// serverStream is a ServerStream with another context.
type serverStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *serverStream) Context() context.Context { return s.ctx }
