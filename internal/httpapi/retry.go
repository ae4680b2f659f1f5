package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"

	"github.com/hermes-agent/hermes/internal/rpc"
)

// retryAfter is the gateway's error handler: a refusal that says when to retry (a quota's
// RESOURCE_EXHAUSTED with google.rpc.RetryInfo, answered 429) gets a Retry-After header in whole
// seconds, rounded up; then the default handler writes the status.
func retryAfter(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	if d := rpc.RetryDelay(err); d > 0 {
		secs := int64((d + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	}
	runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, err)
}
