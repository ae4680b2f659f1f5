package model

import (
	"context"
	"strconv"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Model calls are traced and measured with the OpenTelemetry GenAI semantic conventions: a
// client span "chat <model>" with gen_ai.* attributes, and the gen_ai.client.token.usage and
// gen_ai.client.operation.duration histograms.
const instrumentation = "github.com/hermes-agent/hermes/internal/model"

type instruments struct {
	tracer   trace.Tracer
	tokens   metric.Int64Histogram
	duration metric.Float64Histogram
}

// newInstruments uses the global providers, which internal/telemetry installs; without them the OTel
// API's no-op implementations make this free.
func newInstruments() instruments {
	meter := otel.Meter(instrumentation)
	tokens, _ := meter.Int64Histogram("gen_ai.client.token.usage",
		metric.WithUnit("{token}"), metric.WithDescription("Tokens used by model calls, by gen_ai.token.type (input, output)"))
	duration, _ := meter.Float64Histogram("gen_ai.client.operation.duration",
		metric.WithUnit("s"), metric.WithDescription("Duration of model calls"))
	return instruments{tracer: otel.Tracer(instrumentation), tokens: tokens, duration: duration}
}

// observe starts the span of one call; the returned function ends it with the outcome.
func (c *Client) observe(ctx context.Context, req Request, streaming bool) (context.Context, func(*Response, error)) {
	model := req.Model
	if model == "" {
		model = c.model
	}
	base := []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", "chat"),
		attribute.String("gen_ai.provider.name", "openai"),
		attribute.String("gen_ai.request.model", model),
	}
	attrs := append(append([]attribute.KeyValue{}, base...),
		attribute.String("server.address", c.base),
		attribute.Bool("hermes.model.streaming", streaming),
		attribute.Int("hermes.model.tools", len(req.Tools)),
	)
	if req.MaxTokens > 0 {
		attrs = append(attrs, attribute.Int("gen_ai.request.max_tokens", req.MaxTokens))
	}
	ctx, span := c.inst.tracer.Start(ctx, "chat "+model, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	start := time.Now()
	return ctx, func(out *Response, err error) {
		defer span.End()
		metricAttrs := base
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
			metricAttrs = append(append([]attribute.KeyValue{}, base...), attribute.String("error.type", errorType(err)))
		}
		c.inst.duration.Record(ctx, time.Since(start).Seconds(), metric.WithAttributes(metricAttrs...))
		if out == nil {
			return
		}
		span.SetAttributes(
			attribute.String("gen_ai.response.model", out.Model),
			attribute.String("gen_ai.response.id", out.ID),
			attribute.StringSlice("gen_ai.response.finish_reasons", []string{out.FinishReason}),
			attribute.Int("hermes.model.tool_calls", len(out.ToolCalls)),
		)
		if out.Usage.Reported {
			span.SetAttributes(
				attribute.Int("gen_ai.usage.input_tokens", out.Usage.PromptTokens),
				attribute.Int("gen_ai.usage.output_tokens", out.Usage.CompletionTokens),
				attribute.Int("gen_ai.usage.cache_read.input_tokens", out.Usage.CachedTokens),
			)
			in := append(append([]attribute.KeyValue{}, base...), attribute.String("gen_ai.token.type", "input"))
			outAttrs := append(append([]attribute.KeyValue{}, base...), attribute.String("gen_ai.token.type", "output"))
			c.inst.tokens.Record(ctx, int64(out.Usage.PromptTokens), metric.WithAttributes(in...))
			c.inst.tokens.Record(ctx, int64(out.Usage.CompletionTokens), metric.WithAttributes(outAttrs...))
		}
	}
}

func errorType(err error) string {
	switch {
	case StatusCode(err) != 0:
		return "http_" + strconv.Itoa(StatusCode(err))
	case Unavailable(err):
		return "unavailable"
	default:
		return "other"
	}
}
