package auth

import (
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// The refusal of a call that carries no key, in the words of its transport: a gRPC caller sends
// metadata, an HTTP caller (the HTTP/JSON API, the MCP endpoint, the profiler) a header.
const (
	noKeyMessage     = `an API key is required: send the metadata "authorization: Bearer <key>"`
	noKeyHTTPMessage = `an API key is required: send the header "Authorization: Bearer <key>" (or "X-Api-Key: <key>")`
)

// ForHTTP returns err as an HTTP caller should read it: the refusal of a call without a key
// names the Authorization header instead of gRPC metadata. Other errors are returned unchanged.
func ForHTTP(err error) error {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unauthenticated || st.Message() != noKeyMessage {
		return err
	}
	p := st.Proto()
	p.Message = noKeyHTTPMessage
	return status.ErrorProto(p)
}

// UserHeader is how an HTTP caller acting for users (an operator's or a service's key) names the
// user of a request to Hermes' MCP endpoint; Hermes' HTTP tools receive the same header.
const UserHeader = "X-Hermes-User-Id"

// maxUserHeaderBytes bounds the user an HTTP request names: the services take user ids of at
// most 128 to 256 bytes, and the MCP endpoint keys each session's caller by it.
const maxUserHeaderBytes = 256

// AuthenticateHTTP returns the caller of an HTTP request, from its "Authorization: Bearer" or
// "X-Api-Key" header, as Authenticate does for gRPC metadata.
func (a *Authenticator) AuthenticateHTTP(r *http.Request) (Principal, error) {
	md := metadata.MD{}
	if v := r.Header.Values("Authorization"); len(v) > 0 {
		md.Set("authorization", v...)
	}
	if v := r.Header.Get("X-Api-Key"); v != "" {
		md.Set("x-api-key", v)
	}
	return a.Authenticate(metadata.NewIncomingContext(r.Context(), md))
}

// AuthorizeHTTPUser authenticates an HTTP request and authorizes it for method (a user-scoped
// entry such as MCPEndpointMethod), for the user the request names in UserHeader, with the same
// user scope as a user-scoped RPC's user_id: a user key acts as its own user (naming another is
// PERMISSION_DENIED), an operator or a service as the named user or none. It returns the
// principal and the user the request acts for.
func (a *Authenticator) AuthorizeHTTPUser(r *http.Request, method string) (Principal, string, error) {
	p, err := a.AuthenticateHTTP(r)
	if err != nil {
		return Principal{}, "", ForHTTP(err)
	}
	named := r.Header.Get(UserHeader)
	if len(named) > maxUserHeaderBytes {
		return Principal{}, "", status.Errorf(codes.InvalidArgument, "the %s header is over %d bytes", UserHeader, maxUserHeaderBytes)
	}
	// The request that carries the named user through the policy's user scope.
	req := &toolsv1.ExecuteToolRequest{UserId: named}
	if err := a.Authorize(p, method, req); err != nil {
		return Principal{}, "", err
	}
	return p, req.GetUserId(), nil
}

// WriteHTTPError answers an HTTP request refused by authentication (401, with a challenge),
// authorization (403) or for a malformed credential header (400).
func WriteHTTPError(w http.ResponseWriter, err error) {
	err = ForHTTP(err)
	code := http.StatusForbidden
	switch status.Code(err) {
	case codes.Unauthenticated:
		code = http.StatusUnauthorized
		w.Header().Set("WWW-Authenticate", `Bearer realm="hermes"`)
	case codes.InvalidArgument:
		code = http.StatusBadRequest
	}
	http.Error(w, status.Convert(err).Message(), code)
}
