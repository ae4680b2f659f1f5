// Package otlptest is an OTLP/gRPC trace receiver for tests: processes under test export their
// spans to it (OTEL_EXPORTER_OTLP_ENDPOINT=http://<Addr>), and the test inspects them. It is not
// a collector; it keeps spans in memory.
package otlptest

import (
	"context"
	"encoding/hex"
	"net"
	"sort"
	"sync"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// Span is a received span with the service that sent it.
type Span struct {
	Service    string
	Name       string
	TraceID    string
	SpanID     string
	ParentID   string
	Attributes map[string]string
}

// Receiver collects exported spans.
type Receiver struct {
	coltracepb.UnimplementedTraceServiceServer
	srv *grpc.Server
	lis net.Listener

	mu    sync.Mutex // guards spans
	spans []Span
}

// Start listens on a loopback port.
func Start() (*Receiver, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Receiver{srv: grpc.NewServer(), lis: lis}
	coltracepb.RegisterTraceServiceServer(r.srv, r)
	go func() { _ = r.srv.Serve(lis) }()
	return r, nil
}

// Endpoint is the value for OTEL_EXPORTER_OTLP_ENDPOINT.
func (r *Receiver) Endpoint() string { return "http://" + r.lis.Addr().String() }

// Close stops the receiver.
func (r *Receiver) Close() { r.srv.Stop() }

// Export implements the OTLP trace service.
func (r *Receiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				attrs := map[string]string{}
				for _, kv := range sp.GetAttributes() {
					v := kv.GetValue()
					switch {
					case v.GetStringValue() != "":
						attrs[kv.GetKey()] = v.GetStringValue()
					default:
						attrs[kv.GetKey()] = v.String()
					}
				}
				r.spans = append(r.spans, Span{
					Service:    service,
					Name:       sp.GetName(),
					TraceID:    hex.EncodeToString(sp.GetTraceId()),
					SpanID:     hex.EncodeToString(sp.GetSpanId()),
					ParentID:   hex.EncodeToString(sp.GetParentSpanId()),
					Attributes: attrs,
				})
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// Spans returns every span received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Trace returns the spans of one trace.
func (r *Receiver) Trace(traceID string) []Span {
	var out []Span
	for _, s := range r.Spans() {
		if s.TraceID == traceID {
			out = append(out, s)
		}
	}
	return out
}

// Services returns the distinct services of a set of spans, sorted.
func Services(spans []Span) []string {
	seen := map[string]bool{}
	for _, s := range spans {
		seen[s.Service] = true
	}
	out := make([]string, 0, len(seen))
	for s := range seen {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}
