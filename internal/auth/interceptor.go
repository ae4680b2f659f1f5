package auth

import (
	"context"
	"crypto/x509"
	"log/slog"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Authenticator authenticates callers and authorizes their calls against the policy table.
type Authenticator struct {
	// keys is nil when no auth file is configured: callers without a client certificate are
	// then anonymous, with every right (loopback or --insecure-no-auth only; see app).
	keys   *KeyFile
	policy map[string]Access
	log    *slog.Logger
}

// New returns an Authenticator over the auth file's keys (nil: authentication off).
func New(keys *KeyFile, log *slog.Logger) *Authenticator {
	if log == nil {
		log = slog.Default()
	}
	return &Authenticator{keys: keys, policy: Policy(), log: log}
}

// Enabled reports whether API keys are configured.
func (a *Authenticator) Enabled() bool { return a.keys != nil }

// Authenticate returns the caller of an incoming call: a client certificate verified against
// the configured client CA is the service principal; otherwise the bearer API key decides. With
// no keys configured, a caller without a certificate is anonymous.
func (a *Authenticator) Authenticate(ctx context.Context) (Principal, error) {
	if p, ok := certPrincipal(ctx); ok {
		return p, nil
	}
	key, sent := bearerKey(ctx)
	if a.keys == nil {
		return anonymousPrincipal, nil
	}
	if !sent {
		return Principal{}, status.Error(codes.Unauthenticated, noKeyMessage)
	}
	p, ok := a.keys.Lookup(key)
	if !ok {
		return Principal{}, status.Error(codes.Unauthenticated, "the API key is not known")
	}
	return p, nil
}

// certPrincipal is the service principal of a verified client certificate. The TLS handshake
// verified it against the client CA (VerifiedChains is empty otherwise).
func certPrincipal(ctx context.Context) (Principal, bool) {
	pr, ok := peer.FromContext(ctx)
	if !ok {
		return Principal{}, false
	}
	info, ok := pr.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return Principal{}, false
	}
	return Principal{Role: RoleService, Name: "service:cert:" + certName(info.State.VerifiedChains[0][0])}, true
}

func certName(c *x509.Certificate) string {
	switch {
	case len(c.URIs) > 0:
		return c.URIs[0].String()
	case len(c.DNSNames) > 0:
		return c.DNSNames[0]
	case c.Subject.CommonName != "":
		return c.Subject.CommonName
	}
	return c.SerialNumber.String()
}

// bearerKey reads "authorization: Bearer <key>" or "x-api-key: <key>".
func bearerKey(ctx context.Context) (string, bool) {
	// Only the two keys: FromIncomingContext copies the whole metadata, on every call.
	for _, v := range metadata.ValueFromIncomingContext(ctx, "authorization") {
		scheme, rest, ok := strings.Cut(strings.TrimSpace(v), " ")
		if ok && strings.EqualFold(scheme, "bearer") {
			return strings.TrimSpace(rest), true
		}
	}
	if v := metadata.ValueFromIncomingContext(ctx, "x-api-key"); len(v) > 0 {
		return strings.TrimSpace(v[0]), true
	}
	return "", false
}

// Authorize checks that p may call method with req (nil for a stream before its first
// message): the policy entry's roles, then for user principals the user scope and the entry's
// own check. It may set the request's empty user_id to the principal's user.
func (a *Authenticator) Authorize(p Principal, method string, req proto.Message) error {
	acc, ok := a.policy[method]
	if !ok {
		return status.Errorf(codes.PermissionDenied, "%s has no access policy; nobody may call it", method)
	}
	if acc.Public {
		return nil
	}
	if !acc.allows(p) {
		return status.Errorf(codes.PermissionDenied, "%s may not call %s", roleName(p), method)
	}
	if req == nil || p.Anonymous || p.Role != RoleUser {
		return nil
	}
	if acc.UserScoped {
		if err := scopeUser(p, req); err != nil {
			return err
		}
	}
	if acc.CheckUser != nil {
		if err := acc.CheckUser(req); err != nil {
			return status.Error(codes.PermissionDenied, err.Error())
		}
	}
	return nil
}

func roleName(p Principal) string {
	if p.Role == RoleUser {
		return "a user key"
	}
	return "a principal of role " + p.Role.String()
}

// scopeUser makes a user principal's request act for that user only.
func scopeUser(p Principal, req proto.Message) error {
	m := req.ProtoReflect()
	fd := m.Descriptor().Fields().ByName("user_id")
	if fd == nil || fd.Kind() != protoreflect.StringKind || fd.IsList() {
		// The policy table says the method is user-scoped, so its request must say whose data
		// it is; policy_test.go checks every such request has the field.
		return status.Errorf(codes.Internal, "%s has no user_id to scope", m.Descriptor().FullName())
	}
	switch got := m.Get(fd).String(); got {
	case "":
		m.Set(fd, protoreflect.ValueOfString(p.User))
	case p.User:
	default:
		return status.Errorf(codes.PermissionDenied, "the API key belongs to another user than %q", truncate(got, 128))
	}
	return nil
}

// UnaryInterceptor authenticates and authorizes every unary call.
func (a *Authenticator) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, err := a.check(ctx, info.FullMethod, req)
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamInterceptor authenticates and authorizes every streaming call; each received message
// is checked like a unary request.
func (a *Authenticator) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, err := a.check(ss.Context(), info.FullMethod, nil)
		if err != nil {
			return err
		}
		p, _ := FromContext(ctx)
		return handler(srv, &checkedStream{ServerStream: ss, ctx: ctx, a: a, p: p, method: info.FullMethod})
	}
}

// check authenticates unless the context already carries the in-process principal (set by
// TrustInProcess, never by a network caller), authorizes, and returns the context with the
// principal.
func (a *Authenticator) check(ctx context.Context, method string, req any) (context.Context, error) {
	if a.policy[method].Public {
		return ctx, nil
	}
	p, ok := FromContext(ctx)
	if !ok {
		var err error
		if p, err = a.Authenticate(ctx); err != nil {
			return ctx, err
		}
		ctx = NewContext(ctx, p)
	}
	record(ctx, p)
	msg, _ := req.(proto.Message)
	if err := a.Authorize(p, method, msg); err != nil {
		return ctx, err
	}
	return ctx, nil
}

type checkedStream struct {
	grpc.ServerStream
	ctx    context.Context
	a      *Authenticator
	p      Principal
	method string
}

func (s *checkedStream) Context() context.Context { return s.ctx }

func (s *checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	msg, ok := m.(proto.Message)
	if !ok {
		return status.Error(codes.Internal, "unexpected stream message type")
	}
	return s.a.Authorize(s.p, s.method, msg)
}

// TrustInProcess marks calls made from Hermes' own services in this process: an interceptor
// placed before the Authenticator's on the in-process channel. Network calls never pass
// through it.
func TrustInProcess() (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	unary := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return handler(NewContext(ctx, inProcessPrincipal), req)
	}
	stream := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, &contextStream{ServerStream: ss, ctx: NewContext(ss.Context(), inProcessPrincipal)})
	}
	return unary, stream
}

type contextStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *contextStream) Context() context.Context { return s.ctx }
