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

// TestNoExporterRecordsNothing: without an OTLP endpoint no span is recorded (it would cost
// CPU and go nowhere). A root span of our own still has a trace id, and its children and the
// propagated context carry it. Under a caller's trace context every span is the caller's own:
// its trace id, span id and sampled flag are passed on as they came.
func TestNoExporterRecordsNothing(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	ctx := context.Background()
	tel, err := Setup(ctx, Options{ServiceName: "hermes-test", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tel.Shutdown(ctx) }()
	tr := otel.Tracer("test")
	prop := otel.GetTextMapPropagator()
	traceparent := func(ctx context.Context) string {
		c := propagation.MapCarrier{}
		prop.Inject(ctx, c)
		return c.Get("traceparent")
	}

	rctx, root := tr.Start(ctx, "own")
	defer root.End()
	if root.IsRecording() || !root.SpanContext().HasTraceID() {
		t.Errorf("a root span of our own: recording %v, trace id %v; want not recording, with a trace id",
			root.IsRecording(), root.SpanContext().HasTraceID())
	}
	cctx, child := tr.Start(rctx, "child")
	child.End()
	if child.IsRecording() || !child.SpanContext().Equal(root.SpanContext()) {
		t.Errorf("a child of our root: recording %v, span context %v; want not recording, the root's %v",
			child.IsRecording(), child.SpanContext(), root.SpanContext())
	}
	if got, want := traceparent(cctx), traceparent(rctx); got == "" || got != want {
		t.Errorf("child's traceparent %q, want the root's %q", got, want)
	}

	for _, caller := range []string{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
	} {
		pctx := prop.Extract(ctx, propagation.MapCarrier{"traceparent": caller})
		sctx, span := tr.Start(pctx, "server")
		_, inner := tr.Start(sctx, "inner")
		if span.IsRecording() || inner.IsRecording() {
			t.Errorf("caller %s: spans recording %v, %v; want neither", caller, span.IsRecording(), inner.IsRecording())
		}
		if got := traceparent(sctx); got != caller {
			t.Errorf("caller %s: passed on %q, want it as it came", caller, got)
		}
		inner.End()
		span.End()
	}
}
