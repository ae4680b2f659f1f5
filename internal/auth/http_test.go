package auth

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestForHTTP: a call without a key is told to send gRPC metadata over gRPC and the
// Authorization header over HTTP; other errors keep their words.
func TestForHTTP(t *testing.T) {
	k, err := LoadKeyFile(writeKeys(t, "sk-alice-0123456789abcdef: alice\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, grpcErr := New(k, nil).Authenticate(context.Background())
	if status.Code(grpcErr) != codes.Unauthenticated || !strings.Contains(status.Convert(grpcErr).Message(), `metadata "authorization: Bearer <key>"`) {
		t.Errorf("gRPC: %v", grpcErr)
	}
	httpErr := ForHTTP(grpcErr)
	if msg := status.Convert(httpErr).Message(); status.Code(httpErr) != codes.Unauthenticated ||
		!strings.Contains(msg, `header "Authorization: Bearer <key>"`) || strings.Contains(msg, "metadata") {
		t.Errorf("HTTP: %v", httpErr)
	}
	for _, other := range []error{
		status.Error(codes.Unauthenticated, "the API key is not known"),
		status.Error(codes.PermissionDenied, "a user key may not call X"),
		errors.New("plain"),
		nil,
	} {
		if got := ForHTTP(other); got != other {
			t.Errorf("ForHTTP(%v) = %v, want it unchanged", other, got)
		}
	}
}
