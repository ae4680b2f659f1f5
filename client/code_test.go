package client_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/client"
)

func TestCode(t *testing.T) {
	tests := []struct {
		err  error
		want codes.Code
	}{
		{nil, codes.OK},
		{status.Error(codes.NotFound, "no session"), codes.NotFound},
		{fmt.Errorf("listing: %w", status.Error(codes.PermissionDenied, "not yours")), codes.PermissionDenied},
		{&client.TurnError{TurnID: "t1", Code: codes.Unavailable, Message: "model down"}, codes.Unavailable},
		{fmt.Errorf("waiting: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{context.Canceled, codes.Canceled},
		{errors.New("something else"), codes.Unknown},
	}
	for _, tt := range tests {
		if got := client.Code(tt.err); got != tt.want {
			t.Errorf("Code(%v) = %s, want %s", tt.err, got, tt.want)
		}
	}
}
