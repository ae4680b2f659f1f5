// Package telemetry sets up logging, OpenTelemetry tracing (OTLP export when the standard
// OTEL_EXPORTER_OTLP_* variables are set) and Prometheus metrics for a Hermes process.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
)

// NewLogger returns a slog logger writing to w at level ("debug", "info", "warn", "error") in
// format ("text" or "json").
func NewLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("log format %q: want text or json", format)
	}
}

// Options configure Setup.
type Options struct {
	// ServiceName is the OTel service.name, for example "hermes-session" or "hermes".
	ServiceName string
	// Version is the service.version.
	Version string
	// Revision is the VCS revision the binary was built from, for hermes_build_info.
	Revision string
	// MetricsListen is the HTTP address serving /metrics; empty disables the endpoint (metrics
	// are still recorded).
	MetricsListen string
	// Logger receives errors of the exporters and the metrics server.
	Logger *slog.Logger
	// Middleware, when set, wraps every handler of the metrics listener (the browser guard).
	Middleware func(http.Handler) http.Handler
}

// Telemetry is the process's telemetry; Shutdown flushes and stops it.
type Telemetry struct {
	tracer  *sdktrace.TracerProvider
	meter   *sdkmetric.MeterProvider
	metrics *http.Server
	mux     *http.ServeMux
	// MetricsAddr is the address /metrics listens on, when enabled.
	MetricsAddr string
}

// Setup installs the global tracer provider, meter provider and propagator. OTel's API is
// global by design: instrumentation libraries (otelgrpc, otelhttp) find the providers there.
// Tracing exports over OTLP/gRPC when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set; otherwise no span is recorded, and the W3C trace
// context (a caller's, or a new trace id for a turn that came without one) is still propagated.
func Setup(ctx context.Context, opts Options) (*Telemetry, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { opts.Logger.Warn("telemetry", "error", err) }))
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		semconv.ServiceName(opts.ServiceName),
		semconv.ServiceVersion(opts.Version),
	))
	if err != nil {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}
	t := &Telemetry{}
	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" {
		exp, err := otlptracegrpc.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("otlp trace exporter: %w", err)
		}
		tpOpts = append(tpOpts, sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second)))
		t.tracer = sdktrace.NewTracerProvider(tpOpts...)
		otel.SetTracerProvider(t.tracer)
	} else {
		// Nothing would receive the spans: record none (root spans still get trace ids, and a
		// caller's trace context is passed on as it came).
		t.tracer = sdktrace.NewTracerProvider(append(tpOpts, sdktrace.WithSampler(sdktrace.NeverSample()))...)
		otel.SetTracerProvider(rootsOnly{sdk: t.tracer})
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo(opts))
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	t.meter = sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(exp))
	otel.SetMeterProvider(t.meter)

	if opts.MetricsListen != "" {
		lis, err := net.Listen("tcp", opts.MetricsListen)
		if err != nil {
			return nil, fmt.Errorf("metrics listener: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
		t.mux = mux
		var h http.Handler = mux
		if opts.Middleware != nil {
			h = opts.Middleware(mux)
		}
		t.metrics = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		t.MetricsAddr = lis.Addr().String()
		go func() {
			if err := t.metrics.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				opts.Logger.Error("metrics server", "error", err)
			}
		}()
	}
	return t, nil
}

// buildInfo is the hermes_build_info gauge: always 1, its labels say what is running.
func buildInfo(opts Options) prometheus.Collector {
	label := func(v string) string {
		if v == "" {
			return "unknown"
		}
		return v
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "hermes_build_info",
		Help: "Always 1; the labels are the version, VCS revision and Go version of the running binary.",
		ConstLabels: prometheus.Labels{
			"version":    label(opts.Version),
			"revision":   label(opts.Revision),
			"go_version": runtime.Version(),
		},
	})
	g.Set(1)
	return g
}

// Handle adds a handler to the metrics listener (no-op when it is disabled): the readiness
// probe, which needs the services that start after telemetry.
func (t *Telemetry) Handle(pattern string, h http.Handler) {
	if t.mux != nil {
		t.mux.Handle(pattern, h)
	}
}

// Shutdown flushes pending spans and stops the exporters and the metrics server.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	if t.metrics != nil {
		errs = append(errs, t.metrics.Shutdown(ctx))
	}
	errs = append(errs, t.tracer.Shutdown(ctx), t.meter.Shutdown(ctx))
	return errors.Join(errs...)
}
