package httpapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/hermes-agent/hermes/internal/rpc"
)

// setRetryAfter gives a refusal that says when to retry (a quota's RESOURCE_EXHAUSTED with
// google.rpc.RetryInfo, answered 429) a Retry-After header in whole seconds, rounded up; the
// gateway's error handler (httpErrorHandler) calls it before writing the status.
func setRetryAfter(w http.ResponseWriter, err error) {
	if d := rpc.RetryDelay(err); d > 0 {
		secs := int64((d + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	}
}
