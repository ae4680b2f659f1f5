package mcpgateway

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/hermes-agent/hermes/internal/rpc"
	"github.com/hermes-agent/hermes/internal/testenv"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// TestCallToolLocalAndGRPC calls a real gateway's CallTool directly in process (rpc.LocalUnary,
// as the tool service of hermes serve does) and over gRPC: the same results and errors, and the
// gateway's own duration metric records every call on both paths, by outcome.
func TestCallToolLocalAndGRPC(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := otel.GetMeterProvider()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	t.Cleanup(func() { otel.SetMeterProvider(mp) })

	e := newEdgeServer(t)
	g := New(testConfig(), Options{Logger: testLogger(t)})
	t.Cleanup(g.Close)
	gwReady(t, g, httpSpec("edges", "edges", e.url()))
	srv := rpc.NewServer(rpc.ServerOptions{Logger: testLogger(t), ShutdownTimeout: time.Second})
	gws := NewServer(g)
	srv.Register(&pb.MCPGatewayService_ServiceDesc, gws)
	client := pb.NewMCPGatewayServiceClient(testenv.Serve(t, srv))
	paths := map[string]func(context.Context, *pb.CallToolRequest) (*pb.CallToolResponse, error){
		"local": rpc.LocalUnary(srv, pb.MCPGatewayService_CallTool_FullMethodName, gws.CallTool),
		"grpc": func(ctx context.Context, req *pb.CallToolRequest) (*pb.CallToolResponse, error) {
			return client.CallTool(ctx, req)
		},
	}

	type answer struct {
		Resp *pb.CallToolResponse
		Code codes.Code
		Msg  string
	}
	tests := []struct {
		name    string
		req     *pb.CallToolRequest
		timeout time.Duration
		outcome string
	}{
		{"ok", &pb.CallToolRequest{Server: "edges", Tool: "ok", Arguments: `{}`, UserId: "u1"}, 0, "ok"},
		{"unknown tool", &pb.CallToolRequest{Server: "edges", Tool: "missing"}, 0, codeUnknownTool},
		{"invalid request", &pb.CallToolRequest{Server: "edges", Tool: "ok", Arguments: `[1]`}, 0, "rpc:InvalidArgument"},
		{"invalid UTF-8", &pb.CallToolRequest{Server: "edges", Tool: "ok", UserId: "u\xff"}, 0, ""},
		{"the caller's deadline passed", &pb.CallToolRequest{Server: "edges", Tool: "ok"}, -time.Second, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := map[string]answer{}
			for name, call := range paths {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				if tt.timeout != 0 {
					ctx, cancel = context.WithTimeout(context.Background(), tt.timeout)
				}
				resp, err := call(ctx, tt.req)
				cancel()
				a := answer{Resp: resp, Code: status.Code(err), Msg: status.Convert(err).Message()}
				if a.Resp != nil {
					a.Resp.Duration = nil // timing
				}
				got[name] = a
			}
			switch tt.name {
			case "invalid UTF-8":
				// gRPC's client refuses to send it; the local call refuses it as the listener's
				// codec would have.
				if got["local"].Code != codes.InvalidArgument || got["grpc"].Code == codes.OK {
					t.Errorf("invalid UTF-8: local %v, gRPC %v; want INVALID_ARGUMENT and an error", got["local"], got["grpc"])
				}
			case "the caller's deadline passed":
				// gRPC's client fails the call before sending it; the local call's handler
				// sees the ended context: DEADLINE_EXCEEDED either way.
				for name, a := range got {
					if a.Code != codes.DeadlineExceeded {
						t.Errorf("%s: %v, want DEADLINE_EXCEEDED", name, a)
					}
				}
			default:
				if diff := cmp.Diff(got["grpc"], got["local"], protocmp.Transform()); diff != "" {
					t.Errorf("local call differs from gRPC (-grpc +local):\n%s", diff)
				}
			}
		})
	}

	// Every call that reached the handler was timed, on both paths.
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "hermes.mcpgateway.call.duration" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
				method, _ := dp.Attributes.Value(attribute.Key("rpc.method"))
				outcome, _ := dp.Attributes.Value(attribute.Key("outcome"))
				counts[method.AsString()+" "+outcome.AsString()] += dp.Count
			}
		}
	}
	// The local invalid UTF-8 call is refused inside the interceptor chain, before the handler;
	// the gRPC one and the one past its deadline never reach the server; the local one past its
	// deadline does, and the gateway answers it DEADLINE_EXCEEDED.
	want := map[string]uint64{"CallTool ok": 2, "CallTool " + codeUnknownTool: 2, "CallTool rpc:InvalidArgument": 2, "CallTool rpc:DeadlineExceeded": 1}
	if diff := cmp.Diff(want, counts); diff != "" {
		t.Errorf("hermes.mcpgateway.call.duration counts (-want +got):\n%s", diff)
	}
}
