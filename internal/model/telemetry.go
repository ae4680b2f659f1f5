package model

import (
	"context"
	"slices"
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
	// byModel holds the metric attributes of the client's default model, built once: building
	// and hashing an attribute set for every record was a measurable part of a call's cost.
	byModel modelAttrs
}

// modelAttrs are one model's metric attributes: the call's, and the token counts'.
type modelAttrs struct {
	model               string
	base                []attribute.KeyValue
	call, input, output metric.MeasurementOption
}

func newModelAttrs(model string) modelAttrs {
	base := []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", "chat"),
		attribute.String("gen_ai.provider.name", "openai"),
		attribute.String("gen_ai.request.model", model),
	}
	with := func(extra ...attribute.KeyValue) metric.MeasurementOption {
		return metric.WithAttributeSet(attribute.NewSet(append(slices.Clip(base), extra...)...))
	}
	return modelAttrs{
		model:  model,
		base:   base,
		call:   with(),
		input:  with(attribute.String("gen_ai.token.type", "input")),
		output: with(attribute.String("gen_ai.token.type", "output")),
	}
}

// newInstruments uses the global providers, which internal/telemetry installs; without them the OTel
// API's no-op implementations make this free.
func newInstruments(model string) instruments {
	meter := otel.Meter(instrumentation)
	tokens, _ := meter.Int64Histogram("gen_ai.client.token.usage",
		metric.WithUnit("{token}"), metric.WithDescription("Tokens used by model calls, by gen_ai.token.type (input, output)"))
	duration, _ := meter.Float64Histogram("gen_ai.client.operation.duration",
		metric.WithUnit("s"), metric.WithDescription("Duration of model calls"))
	return instruments{tracer: otel.Tracer(instrumentation), tokens: tokens, duration: duration, byModel: newModelAttrs(model)}
}

// observe starts the span of one call; the returned function ends it with the outcome. The
// span's attributes are built only when it records: without an exporter (or a sampled caller)
// it records nothing, and the attributes were a dozen allocations a call for no one.
func (c *Client) observe(ctx context.Context, req Request, streaming bool) (context.Context, func(*Response, error)) {
	ma := &c.inst.byModel
	if req.Model != "" && req.Model != ma.model {
		m := newModelAttrs(req.Model)
		ma = &m
	}
	ctx, span := c.inst.tracer.Start(ctx, "chat "+ma.model, trace.WithSpanKind(trace.SpanKindClient))
	recording := span.IsRecording()
	if recording {
		span.SetAttributes(ma.base...)
		span.SetAttributes(
			attribute.String("server.address", c.base),
			attribute.Bool("hermes.model.streaming", streaming),
			attribute.Int("hermes.model.tools", len(req.Tools)),
		)
		if req.MaxTokens > 0 {
			span.SetAttributes(attribute.Int("gen_ai.request.max_tokens", req.MaxTokens))
		}
	}
	start := time.Now()
	return ctx, func(out *Response, err error) {
		defer span.End()
		callAttrs := ma.call
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
			callAttrs = metric.WithAttributes(append(slices.Clip(ma.base), attribute.String("error.type", errorType(err)))...)
		}
		c.inst.duration.Record(ctx, time.Since(start).Seconds(), callAttrs)
		if out == nil {
			return
		}
		if recording {
			span.SetAttributes(
				attribute.String("gen_ai.response.model", out.Model),
				attribute.String("gen_ai.response.id", out.ID),
				attribute.StringSlice("gen_ai.response.finish_reasons", []string{out.FinishReason}),
				attribute.Int("hermes.model.tool_calls", len(out.ToolCalls)),
			)
		}
		if out.Usage.Reported {
			if recording {
				span.SetAttributes(
					attribute.Int("gen_ai.usage.input_tokens", out.Usage.PromptTokens),
					attribute.Int("gen_ai.usage.output_tokens", out.Usage.CompletionTokens),
					attribute.Int("gen_ai.usage.cache_read.input_tokens", out.Usage.CachedTokens),
				)
			}
			c.inst.tokens.Record(ctx, int64(out.Usage.PromptTokens), ma.input)
			c.inst.tokens.Record(ctx, int64(out.Usage.CompletionTokens), ma.output)
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
