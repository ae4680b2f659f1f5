package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/hermes-agent/hermes/app"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
	"github.com/hermes-agent/hermes/services/mcpgateway/mcpgatewaytest"
)

// BenchmarkStdioLayers takes BenchmarkStdioInterleaved's Hermes path apart, to show where its
// time goes: the same echo call through the gateway alone and through the tool service, each
// both in process (the channel Hermes' own services use: no network) and over gRPC on loopback
// TCP (as a client program calls), and a trivial gRPC call (health) for the round trip alone.
// Every call of a layer is paired with a direct Go SDK call, the two in alternating order, and
// each layer reports its median and the ratio to the median of its own direct calls, so each
// node process is as busy as the other.
//
//	go test -run '^$' -bench BenchmarkStdioLayers -benchtime 300x ./test/e2e/
func BenchmarkStdioLayers(b *testing.B) {
	ctx := context.Background()
	direct := mcpgatewaytest.DirectEverything(b)
	h := startHermes(b, b.TempDir())
	spec := mcpgatewaytest.EverythingStdio(b, "bench", "bench")
	if resp, err := h.gw.AddServer(ctx, &pb.AddServerRequest{Spec: spec, Wait: true}); err != nil || resp.GetServer().GetState() != pb.ServerState_SERVER_STATE_READY {
		b.Fatalf("AddServer: %v %v", resp, err)
	}
	gwConn, err := h.app.Conn(app.TargetMCPGateway)
	if err != nil {
		b.Fatal(err)
	}
	toolsConn, err := h.app.Conn(app.TargetTools)
	if err != nil {
		b.Fatal(err)
	}
	gwIn, toolsIn := pb.NewMCPGatewayServiceClient(gwConn), toolsv1.NewToolServiceClient(toolsConn)
	health := healthpb.NewHealthClient(h.Conn)
	params := &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "hello"}}
	req := &toolsv1.ExecuteToolRequest{Name: "bench_echo", Arguments: `{"message":"hello"}`}
	greq := &pb.CallToolRequest{Name: "bench_echo", Arguments: `{"message":"hello"}`}
	layers := []struct {
		name string
		call func() error
	}{
		{"gw-inproc", func() error { _, err := gwIn.CallTool(ctx, greq); return err }},
		{"gw-tcp", func() error { _, err := h.gw.CallTool(ctx, greq); return err }},
		{"exec-inproc", func() error { _, err := toolsIn.ExecuteTool(ctx, req); return err }},
		{"exec-tcp", func() error { _, err := h.tools.ExecuteTool(ctx, req); return err }},
		{"health-tcp", func() error { _, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); return err }},
	}
	callDirect := func() error { _, err := direct.CallTool(ctx, params); return err }
	timed := func(f func() error) time.Duration {
		start := time.Now()
		if err := f(); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	for range 20 { // warm every path
		timed(callDirect)
		for _, l := range layers {
			timed(l.call)
		}
	}
	d, t := make([][]time.Duration, len(layers)), make([][]time.Duration, len(layers))
	i := 0
	for b.Loop() {
		for j, l := range layers {
			if (i+j)%2 == 0 {
				d[j], t[j] = append(d[j], timed(callDirect)), append(t[j], timed(l.call))
			} else {
				t[j], d[j] = append(t[j], timed(l.call)), append(d[j], timed(callDirect))
			}
		}
		i++
	}
	var all []time.Duration
	for j, l := range layers {
		all = append(all, d[j]...)
		m := median(t[j])
		b.ReportMetric(float64(m.Microseconds()), l.name+"-µs")
		b.ReportMetric(float64(m)/float64(median(d[j])), l.name+"-x")
	}
	b.ReportMetric(float64(median(all).Microseconds()), "direct-µs")
}
