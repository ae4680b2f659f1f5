package rpc

import (
	"context"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// LocalUnary is a unary method of a service registered on s, called by another of this
// process's services without the in-process channel: handler (the service's own method, the
// one registered for method) runs on the caller's goroutine under the in-process channel's
// interceptor chain — the in-process principal, recovery, the request log, authorization against
// the one policy table, classification, quotas — in the context an in-process handler gets (the
// caller's deadline, cancellation and trace context, none of its other values: not its
// principal, metadata or peer). A request string that is not valid UTF-8 is refused with
// INVALID_ARGUMENT naming the field, as the listener's codec refuses it.
//
// What the channel does and this leaves out: the server's stats handler (no server span and no
// rpc.server.duration for the call; a service called this way records its own), the copy of the
// request and the copy of the response, and the method's lookup by name. So the caller must not
// change req while the call runs, and the handler must keep neither req nor its response after
// it returns; the caller owns the response. A call on the network listener or the in-process
// channel is unchanged.
func LocalUnary[Req, Resp proto.Message](s *Server, method string, handler func(context.Context, Req) (Resp, error)) func(context.Context, Req) (Resp, error) {
	method = fullMethod(method)
	chain := s.inproc.unary
	info := &grpc.UnaryServerInfo{FullMethod: method}
	h := func(ctx context.Context, req any) (any, error) {
		r := req.(Req)
		// A request from the network was checked by the codec, one through the channel is
		// cloned unchecked; this one is checked where the codec would have checked it.
		if field := invalidUTF8(r.ProtoReflect(), "", 0); field != "" {
			return nil, invalidUTF8Error(field)
		}
		return handler(ctx, r)
	}
	return func(ctx context.Context, req Req) (Resp, error) {
		var zero Resp
		sctx, cancel := serverContext(ctx)
		defer cancel()
		sctx = traceContext(sctx, ctx)
		sctx = grpc.NewContextWithServerTransportStream(sctx, &unaryStream{method: method})
		resp, err := chain(sctx, req, info, h)
		if err != nil {
			return zero, err
		}
		out, ok := resp.(Resp)
		if !ok || !out.ProtoReflect().IsValid() {
			return zero, status.Error(codes.Internal, "handler returned neither error nor response message")
		}
		return out, nil
	}
}

// invalidUTF8 is the path of the first string field of m (nested messages, lists and maps
// included) that is not valid UTF-8, or "" when all are.
func invalidUTF8(m protoreflect.Message, path string, depth int) (field string) {
	if depth > maxSanitizeDepth {
		return ""
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := path + string(fd.Name())
		switch {
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len() && field == ""; i++ {
				field = invalidValue(fd, l.Get(i), name, depth)
			}
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				if fd.MapKey().Kind() == protoreflect.StringKind && !utf8.ValidString(k.String()) {
					field = name
				} else {
					field = invalidValue(fd.MapValue(), mv, name, depth)
				}
				return field == ""
			})
		default:
			field = invalidValue(fd, v, name, depth)
		}
		return field == ""
	})
	return field
}

// invalidValue checks one value of field fd (a single field, a list element or a map value).
func invalidValue(fd protoreflect.FieldDescriptor, v protoreflect.Value, name string, depth int) string {
	switch fd.Kind() {
	case protoreflect.StringKind:
		if !utf8.ValidString(v.String()) {
			return name
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return invalidUTF8(v.Message(), name+".", depth+1)
	}
	return ""
}
