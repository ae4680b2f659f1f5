package rpc

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/errclass"
)

func TestClassOf(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"no error", nil, nil},
		{"unavailable", status.Error(codes.Unavailable, "down"), errclass.Unavailable},
		{"not found", status.Error(codes.NotFound, "no turn"), errclass.NotFound},
		{"aborted", status.Error(codes.Aborted, "lost"), errclass.Conflict},
		{"already exists", status.Error(codes.AlreadyExists, "taken"), errclass.Exists},
		{"failed precondition", status.Error(codes.FailedPrecondition, "not running"), errclass.Precondition},
		{"invalid argument", status.Error(codes.InvalidArgument, "bad"), errclass.Invalid},
		{"resource exhausted", status.Error(codes.ResourceExhausted, "too big"), errclass.Exhausted},
		{"permission denied", status.Error(codes.PermissionDenied, "not yours"), errclass.Denied},
		{"unimplemented", status.Error(codes.Unimplemented, "not served here"), errclass.Precondition},
		{"cancelled", status.Error(codes.Canceled, "gone"), context.Canceled},
		{"deadline", status.Error(codes.DeadlineExceeded, "slow"), context.DeadlineExceeded},
		{"local context error", fmt.Errorf("call: %w", context.DeadlineExceeded), context.DeadlineExceeded},
		{"internal has no class", status.Error(codes.Internal, "bug"), nil},
		{"unauthenticated has no class", status.Error(codes.Unauthenticated, "who"), nil},
		{"plain error has no class", errors.New("boom"), nil},
		{"classed on this side", errclass.New(errclass.Unavailable, "the stream ended", nil), errclass.Unavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ClassOf(tt.err); got != tt.want {
				t.Errorf("ClassOf(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

// TestClassOfInvertsClassify: a class sent by Classify reads back as the same class.
func TestClassOfInvertsClassify(t *testing.T) {
	for _, c := range classes {
		sent := Classify(context.Background(), nil, "/m", errclass.New(c.class, "x", nil))
		if _, ok := status.FromError(sent); !ok {
			t.Fatalf("Classify(%v) is not a status", c.class)
		}
		if got := ClassOf(sent); got != c.class {
			t.Errorf("ClassOf(Classify(%v)) = %v", c.class, got)
		}
	}
}
