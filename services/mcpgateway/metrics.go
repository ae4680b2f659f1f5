package mcpgateway

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/rpc"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// callMetrics time the gateway's tool calls. In one process the tool service calls CallTool
// without gRPC's stats handler (rpc.LocalUnary), so rpc.server.duration no longer sees those
// calls: this histogram, recorded by the handlers themselves, sees every call however it came.
// Exported as hermes_mcpgateway_call_duration_seconds.
type callMetrics struct {
	duration metric.Float64Histogram
	// ok are the options of a successful call, by method (the common case builds nothing).
	ok map[string]metric.RecordOption
}

const (
	methodCallTool       = "CallTool"
	methodCallToolStream = "CallToolStream"
)

func newCallMetrics() callMetrics {
	m := otel.Meter("github.com/hermes-agent/hermes/services/mcpgateway")
	d, _ := m.Float64Histogram("hermes.mcpgateway.call.duration", metric.WithUnit("s"),
		metric.WithDescription("Time the MCP gateway took to answer a tool call (CallTool, CallToolStream), by method and outcome: ok, the failed result's error code, or rpc: and the gRPC code of a call that ended in an error"),
		metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 600))
	ok := map[string]metric.RecordOption{}
	for _, method := range []string{methodCallTool, methodCallToolStream} {
		ok[method] = metric.WithAttributeSet(attribute.NewSet(attribute.String("rpc.method", method), attribute.String("outcome", "ok")))
	}
	return callMetrics{duration: d, ok: ok}
}

// done records a call of method that started at start and ended with *resp and *err (pointers,
// so a deferred call sees what the handler returned).
func (m callMetrics) done(ctx context.Context, method string, start time.Time, resp **pb.CallToolResponse, err *error) {
	took := time.Since(start).Seconds()
	if *err == nil && (*resp).GetSuccess() {
		m.duration.Record(ctx, took, m.ok[method])
		return
	}
	var outcome string
	switch {
	case *err != nil:
		// The code the caller gets, once the error is classified.
		outcome = "rpc:" + status.Code(rpc.Classify(ctx, nil, "", *err)).String()
	case *resp == nil:
		// A panic (recovered by the interceptor, deferred calls run first): INTERNAL.
		outcome = "rpc:" + codes.Internal.String()
	default:
		outcome = (*resp).GetErrorCode()
	}
	m.duration.Record(ctx, took, metric.WithAttributes(attribute.String("rpc.method", method), attribute.String("outcome", outcome)))
}
