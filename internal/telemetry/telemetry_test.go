package telemetry

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
)

func TestBuildInfoMetric(t *testing.T) {
	ctx := context.Background()
	tel, err := Setup(ctx, Options{ServiceName: "hermes-test", Version: "v1.2.3", Revision: "c326128", MetricsListen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tel.Shutdown(ctx) }()
	resp, err := http.Get("http://" + tel.MetricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	want := `hermes_build_info{go_version="` + runtime.Version() + `",revision="c326128",version="v1.2.3"} 1`
	if !strings.Contains(string(body), want) {
		t.Errorf("/metrics lacks %s:\n%s", want, body)
	}
}

// TestNoExporterRecordsOnlyCallersTraces: without an OTLP endpoint a span of our own is not
// recorded (it costs CPU and goes nowhere) but still has a trace id, and a span under a caller's
// sampled trace context is recorded and passed on as sampled.
func TestNoExporterRecordsOnlyCallersTraces(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	ctx := context.Background()
	tel, err := Setup(ctx, Options{ServiceName: "hermes-test", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tel.Shutdown(ctx) }()
	tr := otel.Tracer("test")

	_, own := tr.Start(ctx, "own")
	own.End()
	if own.IsRecording() || !own.SpanContext().HasTraceID() {
		t.Errorf("a span of our own: recording %v, trace id %v; want not recording, with a trace id",
			own.IsRecording(), own.SpanContext().HasTraceID())
	}

	carrier := propagation.MapCarrier{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	pctx := otel.GetTextMapPropagator().Extract(ctx, carrier)
	_, child := tr.Start(pctx, "child")
	defer child.End()
	if !child.IsRecording() || !child.SpanContext().IsSampled() {
		t.Errorf("a span under a caller's sampled trace: recording %v, sampled %v; want both",
			child.IsRecording(), child.SpanContext().IsSampled())
	}
}
