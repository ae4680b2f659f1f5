// Package auth decides who is calling a Hermes service and what they may do. Every RPC of every
// service passes through one interceptor (installed by internal/rpc) that authenticates the
// caller — a verified client certificate of Hermes' own CA is the service principal, a bearer
// API key from the auth file is a user, operator or service principal — and authorizes the call
// against one policy table (policy.go) keyed by full method name. A method without an entry is
// refused for everyone, so a new RPC has no access until someone decides who may call it.
package auth

import (
	"context"
	"fmt"
)

// Role is what a principal may do.
type Role int

// The roles.
const (
	// RoleUser is an end user: an API key bound to one user id, acting only on that user's
	// sessions, messages, turns and memories.
	RoleUser Role = iota + 1
	// RoleOperator runs the installation: tools, MCP servers, maintenance, any user's data.
	RoleOperator
	// RoleService is one of Hermes' own services calling another.
	RoleService
)

func (r Role) String() string {
	switch r {
	case RoleUser:
		return "user"
	case RoleOperator:
		return "operator"
	case RoleService:
		return "service"
	}
	return fmt.Sprintf("role(%d)", int(r))
}

// parseRole reads a role name of the auth file.
func parseRole(s string) (Role, bool) {
	switch s {
	case "user":
		return RoleUser, true
	case "operator":
		return RoleOperator, true
	case "service":
		return RoleService, true
	}
	return 0, false
}

// Principal is an authenticated caller.
type Principal struct {
	// Role decides what the principal may do.
	Role Role
	// User is the user id of a RoleUser principal.
	User string
	// Name identifies the principal in logs and records ("user:alice", "operator:ops",
	// "service:cert:hermes-orchestrator", "anonymous").
	Name string
	// Anonymous is set when authentication is off (no keys configured, loopback or
	// --insecure-no-auth): the caller has every role.
	Anonymous bool
	// Quota holds a user key's own limits from the auth file; nil uses the operator's defaults.
	Quota *Quota
}

// Has reports whether the principal holds role r (anonymous principals hold every role).
func (p Principal) Has(r Role) bool { return p.Anonymous || p.Role == r }

// Privileged reports an operator, a service or an anonymous caller: principals that may act
// for any user and use operator-only options.
func (p Principal) Privileged() bool {
	return p.Anonymous || p.Role == RoleOperator || p.Role == RoleService
}

// anonymousPrincipal is the caller when authentication is off.
var anonymousPrincipal = Principal{Name: "anonymous", Anonymous: true}

// inProcessPrincipal is a Hermes service calling another in the same process.
var inProcessPrincipal = Principal{Role: RoleService, Name: "service:in-process"}

type principalKey struct{}

// NewContext returns ctx carrying p.
func NewContext(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the principal the interceptor authenticated for this call. Handlers
// reached without the interceptor (unit tests calling a service directly) see no principal.
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// IsOperator reports whether the caller of ctx is an operator or anonymous (authentication
// off). A call without a principal (a direct Go call, never a network call) counts as one.
func IsOperator(ctx context.Context) bool {
	p, ok := FromContext(ctx)
	return !ok || p.Anonymous || p.Role == RoleOperator
}

// IsPrivileged reports whether the caller of ctx is an operator, a service or anonymous. A call
// without a principal (a direct Go call in a unit test, never a network call: the interceptor
// always sets one) is treated as privileged.
func IsPrivileged(ctx context.Context) bool {
	p, ok := FromContext(ctx)
	return !ok || p.Privileged()
}

// Recorder receives the principal of a call from the authorizing interceptor, for interceptors
// that run outside it (the access log).
type Recorder struct{ p Principal }

type recorderKey struct{}

// WithRecorder returns ctx with a Recorder the interceptor fills in.
func WithRecorder(ctx context.Context) (context.Context, *Recorder) {
	r := &Recorder{}
	return context.WithValue(ctx, recorderKey{}, r), r
}

// Name is the recorded principal's name, or "" before authentication.
func (r *Recorder) Name() string { return r.p.Name }

func record(ctx context.Context, p Principal) {
	if r, ok := ctx.Value(recorderKey{}).(*Recorder); ok {
		r.p = p
	}
}
