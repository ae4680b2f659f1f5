package auth

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
