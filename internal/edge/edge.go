// Package edge is Hermes' front door where the services run in separate processes (the
// Kubernetes layout): the process users reach — the orchestrator's — also serves the
// user-facing RPCs of the session and memory services, so a user with a key reaches their
// sessions, turns and memories at one address while those services stay internal.
//
// A Forwarder serves one service by calling the real one with the process's own service
// identity (its mutual-TLS client certificate, or its service key). It is safe because of
// where it sits: every call reaches it through the process's authorizing interceptor
// (internal/auth), which authenticates the caller and applies the one policy table — the
// user's role, the user scope (a user key's request names that user, filled in when empty,
// refused when another) and the method's own checks — before the Forwarder runs. The
// callee trusts the service principal to name the user, as it trusts the orchestrator's own
// calls, and checks that the session or memory a request names belongs to that user. The
// Forwarder checks the scope once more before it lends its identity, so a mistake in the
// table cannot turn into acting for another user.
//
// Only user-facing methods are forwarded: those the policy table opens to users, all of them
// user-scoped. The others (a summary's rewrite, extraction, maintenance) stay on the service's
// internal address; at the edge they are refused by the policy for users and answer
// UNIMPLEMENTED to operators, and the HTTP API does not route or document them.
package edge

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/hermes-agent/hermes/internal/auth"
	"github.com/hermes-agent/hermes/internal/errclass"
)

// Forwarder serves a gRPC service by forwarding its user-facing methods to conn.
type Forwarder struct {
	desc      grpc.ServiceDesc
	conn      grpc.ClientConnInterface
	log       *slog.Logger
	forwarded []string
	omitted   []string
}

// New returns a Forwarder of the service desc describes (unary methods only) over conn, a
// connection to the service's own address carrying this process's service credentials.
func New(desc *grpc.ServiceDesc, conn grpc.ClientConnInterface, log *slog.Logger) (*Forwarder, error) {
	if len(desc.Streams) > 0 {
		return nil, fmt.Errorf("edge: %s has streaming methods, which the forwarder does not carry", desc.ServiceName)
	}
	if log == nil {
		log = slog.Default()
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(desc.ServiceName))
	if err != nil {
		return nil, fmt.Errorf("edge: %s: %w", desc.ServiceName, err)
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil, fmt.Errorf("edge: %s is not a service", desc.ServiceName)
	}
	f := &Forwarder{conn: conn, log: log}
	f.desc = grpc.ServiceDesc{
		ServiceName: desc.ServiceName,
		// The methods are served by the closures below, not by a Go interface.
		HandlerType: (*any)(nil),
		Metadata:    desc.Metadata,
	}
	policy := auth.Policy()
	for _, m := range desc.Methods {
		full := "/" + desc.ServiceName + "/" + m.MethodName
		md := sd.Methods().ByName(protoreflect.Name(m.MethodName))
		if md == nil {
			return nil, fmt.Errorf("edge: %s is not in the descriptor of %s", full, desc.ServiceName)
		}
		in, err := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
		if err != nil {
			return nil, fmt.Errorf("edge: %s: %w", full, err)
		}
		out, err := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
		if err != nil {
			return nil, fmt.Errorf("edge: %s: %w", full, err)
		}
		fwd := userFacing(policy, full)
		if fwd {
			f.forwarded = append(f.forwarded, full)
		} else {
			f.omitted = append(f.omitted, full)
		}
		f.desc.Methods = append(f.desc.Methods, grpc.MethodDesc{
			MethodName: m.MethodName,
			Handler:    f.handler(full, in, out, fwd),
		})
	}
	return f, nil
}

// userFacing reports whether the edge forwards method: the policy table opens it to users, and
// scopes it to the user (the forwarded request then names the authenticated user).
func userFacing(policy map[string]auth.Access, method string) bool {
	acc, ok := policy[method]
	return ok && !acc.Public && acc.UserScoped && slices.Contains(acc.Roles, auth.RoleUser)
}

// Desc is the service description to register (on the process's rpc.Server, behind its
// interceptors); the Forwarder itself is the implementation.
func (f *Forwarder) Desc() *grpc.ServiceDesc { return &f.desc }

// Forwarded lists the full method names forwarded.
func (f *Forwarder) Forwarded() []string { return slices.Clone(f.forwarded) }

// Omitted lists the full method names of the service that are not forwarded.
func (f *Forwarder) Omitted() []string { return slices.Clone(f.omitted) }

func (f *Forwarder) handler(full string, in, out protoreflect.MessageType, forward bool) grpc.MethodHandler {
	call := func(ctx context.Context, req any) (any, error) {
		if !forward {
			return nil, status.Errorf(codes.Unimplemented, "%s is not served at this address (it is not for users); call the %s service's own address", full, f.desc.ServiceName)
		}
		msg, ok := req.(proto.Message)
		if !ok {
			return nil, status.Errorf(codes.Internal, "unexpected request %T", req)
		}
		if err := checkScope(ctx, msg); err != nil {
			return nil, err
		}
		resp := out.New().Interface()
		if err := f.conn.Invoke(ctx, full, msg, resp); err != nil {
			return nil, f.calleeError(ctx, full, err)
		}
		return resp, nil
	}
	return func(_ any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		req := in.New().Interface()
		if err := dec(req); err != nil {
			return nil, err
		}
		if interceptor == nil {
			return call(ctx, req)
		}
		return interceptor(ctx, req, &grpc.UnaryServerInfo{Server: f, FullMethod: full}, call)
	}
}

// checkScope refuses to lend the service identity to a call the authorizing interceptor has not
// scoped: the caller must be authenticated, and a user's request must name that user.
func checkScope(ctx context.Context, req proto.Message) error {
	p, ok := auth.FromContext(ctx)
	if !ok {
		return status.Error(codes.PermissionDenied, "the edge forwards only authenticated calls")
	}
	if p.Anonymous || p.Role != auth.RoleUser {
		// Operators act for any user, as on the service itself; anonymous callers exist only
		// where authentication is off (loopback or --insecure-no-auth).
		return nil
	}
	m := req.ProtoReflect()
	fd := m.Descriptor().Fields().ByName("user_id")
	if fd == nil || fd.Kind() != protoreflect.StringKind || fd.IsList() || m.Get(fd).String() != p.User {
		return status.Errorf(codes.PermissionDenied, "the edge forwards a user's request only for that user")
	}
	return nil
}

// calleeError passes the callee's answer on as it is (its code, message and details: the caller
// asked that service), except when the callee could not be reached: the transport's text names
// internal addresses, so the caller gets the class and the log gets the cause.
func (f *Forwarder) calleeError(ctx context.Context, method string, err error) error {
	st, ok := status.FromError(err)
	if ok && st.Code() != codes.Unavailable {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	f.log.WarnContext(ctx, "edge: the service behind the edge is unavailable", "method", method, "error", err)
	return errclass.New(errclass.Unavailable, fmt.Sprintf("the %s service is unavailable; retry later", f.desc.ServiceName), err)
}
