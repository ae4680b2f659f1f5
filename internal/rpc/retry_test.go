package rpc

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/errclass"
)

// retryable is a limit's refusal that knows when to retry.
type retryable struct{ d time.Duration }

func (r retryable) Error() string             { return "at most 3 a minute" }
func (r retryable) Public() string            { return "at most 3 a minute" }
func (r retryable) Is(target error) bool      { return target == errclass.Exhausted }
func (r retryable) RetryAfter() time.Duration { return r.d }

// TestClassifyRetryInfo: an error that says when to retry leaves with google.rpc.RetryInfo.
func TestClassifyRetryInfo(t *testing.T) {
	err := Classify(context.Background(), nil, "/m", fmt.Errorf("append: %w", retryable{7 * time.Second}))
	if status.Code(err) != codes.ResourceExhausted || status.Convert(err).Message() != "at most 3 a minute" {
		t.Fatalf("got %v", err)
	}
	if d := RetryDelay(err); d != 7*time.Second {
		t.Errorf("RetryDelay = %v, want 7s", d)
	}
	if d := RetryDelay(Classify(context.Background(), nil, "/m", errclass.New(errclass.Exhausted, "too big", nil))); d != 0 {
		t.Errorf("a size limit carries a retry delay of %v", d)
	}
}
