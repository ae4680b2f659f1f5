package httpapi

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestRetryAfter: RESOURCE_EXHAUSTED with RetryInfo is 429 with Retry-After in whole seconds,
// rounded up; without RetryInfo there is no header.
func TestRetryAfter(t *testing.T) {
	mux := runtime.NewServeMux()
	for _, tc := range []struct {
		delay time.Duration
		want  string
	}{{1500 * time.Millisecond, "2"}, {30 * time.Second, "30"}, {0, ""}} {
		st := status.New(codes.ResourceExhausted, "quota")
		if tc.delay > 0 {
			st, _ = st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(tc.delay)})
		}
		w := httptest.NewRecorder()
		httpErrorHandler(t.Context(), mux, &runtime.JSONPb{}, w, httptest.NewRequest("POST", "/v1/sessions", nil), st.Err())
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != tc.want {
			t.Errorf("delay %v: %d, Retry-After %q; want 429, %q", tc.delay, w.Code, w.Header().Get("Retry-After"), tc.want)
		}
	}
}
