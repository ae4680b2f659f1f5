package rpc

import (
	"context"
	"net"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// A unary call on an in-process channel runs its handler on the caller's goroutine. grpchan
// starts a goroutine per call, whose stack then grows by copying while the handler runs (the
// MCP gateway's CallTool under the tool service's ExecuteTool copied its stack two or three
// times a call), and hands the answer back over a channel. What the handler sees is what
// grpchan gives it: a context with the caller's deadline and cancellation but none of its
// values, the caller's outgoing metadata as incoming metadata, an in-process peer, the same
// interceptors, the server's stats handler with the caller's trace context and baggage, and
// copies of the request and the response. Calls with options the direct path does not carry
// out (headers, trailers, peer or per-call credentials wanted back) and streams go through
// grpchan. Differences: a caller whose context ends waits for the handler to return (grpchan's
// caller returned at once and left the handler running), so handlers must heed their context,
// as Hermes' do; no client-side stats handler runs (no client span or rpc.client metrics: the
// server's span and duration cover the same call); and a method a service hands over
// (responseHandover) gives the caller the response itself.

// unaryMethod is a registered unary method.
type unaryMethod struct {
	impl any
	desc *grpc.MethodDesc
	// handover: the caller gets the handler's response itself, not a copy (responseHandover).
	handover bool
}

// responseHandover is a service some of whose unary methods (named as in its service
// descriptor) build every response afresh and keep no reference to it or to anything in it
// after returning; a response may share messages with the handler's copy of the request. An
// in-process call then gives the caller the response itself: the deep copy of the session
// service's AppendMessages response (the turn's whole context) was 7% of a turn's allocation.
type responseHandover interface {
	InProcessHandover() []string
}

// unaryMethods indexes the unary methods of services by full method name ("/svc/Method").
func unaryMethods(services []registeredService) map[string]unaryMethod {
	m := map[string]unaryMethod{}
	for _, r := range services {
		var handover []string
		if h, ok := r.impl.(responseHandover); ok {
			handover = h.InProcessHandover()
		}
		for i := range r.desc.Methods {
			d := &r.desc.Methods[i]
			m["/"+r.desc.ServiceName+"/"+d.MethodName] = unaryMethod{impl: r.impl, desc: d, handover: slices.Contains(handover, d.MethodName)}
		}
	}
	return m
}

// directOptions reports whether a call's options are all ones the direct path may ignore
// (message size limits, wait-for-ready, compression: none of them means anything in process).
func directOptions(opts []grpc.CallOption) bool {
	for _, o := range opts {
		switch o.(type) {
		case grpc.HeaderCallOption, *grpc.HeaderCallOption, grpc.TrailerCallOption, *grpc.TrailerCallOption,
			grpc.PeerCallOption, *grpc.PeerCallOption, grpc.PerRPCCredsCallOption, *grpc.PerRPCCredsCallOption:
			return false
		}
	}
	return true
}

// invokeUnary runs a unary call on the caller's goroutine.
func (c *channel) invokeUnary(ctx context.Context, method string, m unaryMethod, req, reply any) (err error) {
	in, ok := req.(proto.Message)
	out, ok2 := reply.(proto.Message)
	if !ok || !ok2 {
		return status.Errorf(codes.Internal, "in-process call %s: messages must be protos", method)
	}
	// The handler's context ends with the call, as a network call's does.
	sctx, cancel := serverContext(ctx)
	defer cancel()
	// The server's stats handler traces and times the call; a client handler's span and
	// duration for the same call in the same process were 1.5% of a turn's CPU, and its trace
	// context went through metadata only for the server's handler to parse it back. The
	// caller's span context and baggage are handed over directly instead.
	sctx = traceContext(sctx, ctx)
	sctx = grpc.NewContextWithServerTransportStream(sctx, &unaryStream{method: method})
	if c.serverStats != nil {
		sctx = c.serverStats.TagRPC(sctx, &stats.RPCTagInfo{FullMethodName: method})
		c.serverStats.HandleRPC(sctx, &stats.Begin{BeginTime: time.Now()})
	}
	dec := func(v any) error {
		dst, ok := v.(proto.Message)
		if !ok {
			return status.Errorf(codes.Internal, "in-process call %s: request must be a proto", method)
		}
		proto.Reset(dst)
		proto.Merge(dst, in)
		return nil
	}
	resp, herr := m.desc.Handler(m.impl, sctx, dec, c.unary)
	if c.serverStats != nil {
		c.serverStats.HandleRPC(sctx, &stats.End{EndTime: time.Now(), Error: herr})
	}
	if herr != nil {
		return herr
	}
	msg, ok := resp.(proto.Message)
	if !ok || msg == nil || !msg.ProtoReflect().IsValid() {
		return status.Error(codes.Internal, "handler returned neither error nor response message")
	}
	proto.Reset(out)
	if m.handover && out.ProtoReflect().Descriptor() == msg.ProtoReflect().Descriptor() {
		moveFields(out.ProtoReflect(), msg.ProtoReflect())
	} else {
		proto.Merge(out, msg)
	}
	return nil
}

// traceContext is sctx with the span context and baggage of ctx, as the server's stats handler
// would extract them from metadata a client handler had written.
func traceContext(sctx, ctx context.Context) context.Context {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		sctx = trace.ContextWithRemoteSpanContext(sctx, sc)
	}
	if b := baggage.FromContext(ctx); b.Len() > 0 {
		sctx = baggage.ContextWithBaggage(sctx, b)
	}
	return sctx
}

// moveFields sets dst's populated fields (and unknown fields) to src's values without copying
// them: dst then shares src's messages, lists and maps.
func moveFields(dst, src protoreflect.Message) {
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		dst.Set(fd, v)
		return true
	})
	if u := src.GetUnknown(); len(u) > 0 {
		dst.SetUnknown(u)
	}
}

// serverContext is the handler's context of an in-process call: the caller's deadline and
// cancellation without its values, its outgoing metadata as incoming, and the in-process peer.
// It ends with cancel. It is a cancelable context of the context package, so the contexts a
// handler derives from it find it and start no goroutine each to watch it.
func serverContext(ctx context.Context) (context.Context, context.CancelFunc) {
	sctx, cancel := context.WithCancel(noValues{ctx})
	if md, ok := metadata.FromOutgoingContext(ctx); ok {
		sctx = metadata.NewIncomingContext(sctx, md)
	}
	return peer.NewContext(sctx, &inprocPeer), cancel
}

// noValues passes on a context's deadline and cancellation, not its values.
type noValues struct{ context.Context }

func (noValues) Value(any) any { return nil }

// AfterFunc lets the context serverContext derives register with the caller's for its
// cancellation: hiding the values hides the caller's cancelable context from the context
// package, which then started a goroutine to wait for it, as it did for every context a handler
// derived (the gateway's call clock under each in-process CallTool: 4% of the process's CPU per
// stdio tool call, and one wake-up more).
func (n noValues) AfterFunc(f func()) (stop func() bool) { return context.AfterFunc(n.Context, f) }

var inprocPeer = peer.Peer{Addr: inprocAddr{}, AuthInfo: inprocAddr{}}

// inprocAddr is the address and auth info of an in-process caller (as grpchan names it).
type inprocAddr struct{}

func (inprocAddr) Network() string  { return "inproc" }
func (inprocAddr) String() string   { return "0" }
func (inprocAddr) AuthType() string { return "inproc" }

var _ net.Addr = inprocAddr{}

// unaryStream is the grpc.ServerTransportStream of a direct call: headers and trailers a
// handler sets have no one to go to (calls that want them back take grpchan's path).
type unaryStream struct{ method string }

func (s *unaryStream) Method() string               { return s.method }
func (s *unaryStream) SetHeader(metadata.MD) error  { return nil }
func (s *unaryStream) SendHeader(metadata.MD) error { return nil }
func (s *unaryStream) SetTrailer(metadata.MD) error { return nil }

// fullMethod normalizes a method name to "/svc/Method".
func fullMethod(method string) string {
	if strings.HasPrefix(method, "/") {
		return method
	}
	return "/" + method
}
