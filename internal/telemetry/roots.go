package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"
)

// rootsOnly is the tracer provider of a process that exports no spans. Its root spans come from
// sdk, which records none of them but gives each a trace id, so that a turn's events still carry
// a traceparent a consumer can continue. A span under any other span (the caller's remote one or
// a root of ours) is that span itself: nothing would receive a span of its own, and the SDK's
// per-span work (ids, sampling, options) for the dozen spans of a turn was 4% of a turn's CPU
// under load. The caller's trace context, sampled flag included, is passed on unchanged.
type rootsOnly struct {
	embedded.TracerProvider
	sdk trace.TracerProvider
}

func (p rootsOnly) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return rootsOnlyTracer{sdk: p.sdk.Tracer(name, opts...)}
}

type rootsOnlyTracer struct {
	embedded.Tracer
	sdk trace.Tracer
}

func (t rootsOnlyTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		return noop.Tracer{}.Start(ctx, name, opts...)
	}
	return t.sdk.Start(ctx, name, opts...)
}
