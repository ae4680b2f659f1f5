package rpc

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
)

// traceSeer records the span context and baggage its handler sees.
type traceSeer struct {
	testpb.UnimplementedTestServiceServer
	span    trace.SpanContext
	baggage string
}

func (s *traceSeer) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	s.span = trace.SpanContextFromContext(ctx)
	s.baggage = baggage.FromContext(ctx).String()
	return &testpb.SimpleResponse{}, nil
}

// TestInProcessUnaryContinuesTrace: a direct in-process call's server span is a child of the
// caller's span, in its trace, and the handler sees the caller's baggage, on the direct path and
// on grpchan's (which keeps the client-side span between them).
func TestInProcessUnaryContinuesTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	t.Cleanup(func() {
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
	})

	srv := NewServer(ServerOptions{Logger: quiet})
	svc := &traceSeer{}
	srv.Register(&testpb.TestService_ServiceDesc, svc)
	client := testpb.NewTestServiceClient(srv.InProcess())

	for _, tc := range []struct {
		name string
		opts []grpc.CallOption
	}{
		{"direct", nil},
		{"grpchan", []grpc.CallOption{grpc.Header(new(metadata.MD))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			member, err := baggage.NewMemberRaw("tenant", "租户-7")
			if err != nil {
				t.Fatal(err)
			}
			bag, err := baggage.New(member)
			if err != nil {
				t.Fatal(err)
			}
			ctx, caller := tp.Tracer("test").Start(baggage.ContextWithBaggage(context.Background(), bag), "caller")
			if _, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}, tc.opts...); err != nil {
				t.Fatal(err)
			}
			caller.End()
			if got, want := svc.span.TraceID(), caller.SpanContext().TraceID(); got != want {
				t.Errorf("handler's trace = %v, want the caller's %v", got, want)
			}
			if diff := cmp.Diff(bag.String(), svc.baggage); diff != "" {
				t.Errorf("handler's baggage (-caller +handler):\n%s", diff)
			}
			// The server span is the handler's; its parent is the caller's span (direct) or the
			// client span, whose parent is the caller's (grpchan).
			spans := map[trace.SpanID]sdktrace.ReadOnlySpan{}
			var server sdktrace.ReadOnlySpan
			for _, s := range rec.Ended() {
				spans[s.SpanContext().SpanID()] = s
				if s.SpanContext().SpanID() == svc.span.SpanID() {
					server = s
				}
			}
			if server == nil || server.SpanKind() != trace.SpanKindServer {
				t.Fatalf("no server span for the handler's span %v", svc.span.SpanID())
			}
			parent := server.Parent().SpanID()
			if p, ok := spans[parent]; ok && p.SpanKind() == trace.SpanKindClient {
				parent = p.Parent().SpanID()
			}
			if parent != caller.SpanContext().SpanID() {
				t.Errorf("server span's ancestor = %v, want the caller's span %v", parent, caller.SpanContext().SpanID())
			}
		})
	}
}
