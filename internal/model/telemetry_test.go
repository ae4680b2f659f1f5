package model_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/hermes-agent/hermes/internal/model"
	"github.com/hermes-agent/hermes/internal/model/scripted"
)

// TestGenAISpan: a model call is a client span with the GenAI attributes (model, input and
// output tokens) that tracing backends show for LLM calls.
func TestGenAISpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	c, _ := start(t, scripted.Sequence(scripted.Text("hello there"), scripted.Text("again")), model.Config{Model: "span-model"})
	req := model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}}
	if _, err := c.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stream(context.Background(), req, nil); err != nil {
		t.Fatal(err)
	}
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	for _, sp := range spans {
		attrs := map[string]any{}
		for _, kv := range sp.Attributes() {
			attrs[string(kv.Key)] = kv.Value.AsInterface()
		}
		if sp.Name() != "chat span-model" || attrs["gen_ai.request.model"] != "span-model" || attrs["gen_ai.operation.name"] != "chat" {
			t.Errorf("span %q attrs %v", sp.Name(), attrs)
		}
		if in, _ := attrs["gen_ai.usage.input_tokens"].(int64); in <= 0 {
			t.Errorf("span %q: gen_ai.usage.input_tokens = %v", sp.Name(), attrs["gen_ai.usage.input_tokens"])
		}
		if out, _ := attrs["gen_ai.usage.output_tokens"].(int64); out <= 0 {
			t.Errorf("span %q: gen_ai.usage.output_tokens = %v", sp.Name(), attrs["gen_ai.usage.output_tokens"])
		}
	}
}
