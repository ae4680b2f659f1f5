package multiprocess

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/hermes-agent/hermes/client"
	"github.com/hermes-agent/hermes/internal/model/scripted"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
	"github.com/hermes-agent/hermes/services/mcpgateway/mcpgatewaytest"
	"github.com/hermes-agent/hermes/test/multiprocess/cluster"
)

// BenchmarkStdioInterleavedProcess is issue 27's latency ratio as a user sees it: a Go program
// with the Hermes client (client.Dial, gRPC on loopback TCP) calls ExecuteTool of the
// everything server's echo on a `hermes serve` process, interleaved with the same call made
// directly with the official Go SDK client (mcpgatewaytest.BenchStdioInterleaved).
//
// BENCH_HERMES_ENV adds one KEY=VALUE to the process's environment (HERMES_PPROF_LISTEN=… to
// profile it, GOMAXPROCS=…).
//
//	go test -run '^$' -bench StdioInterleavedProcess -benchtime 300x ./test/multiprocess/
func BenchmarkStdioInterleavedProcess(b *testing.B) {
	c := startStdioBench(b)
	mcpgatewaytest.BenchStdioInterleaved(b, c.Tools, "bench_echo")
}

// BenchmarkStdioLayersProcess splits BenchmarkStdioInterleavedProcess's path: each iteration
// makes the direct call, ExecuteTool, the gateway's CallTool over gRPC (without the tool
// service) and a health check (a trivial gRPC round trip) once each, in an order that rotates,
// and reports the median of each and the ratios to the direct call. Unlike the two-call
// benchmark, `hermes serve` is rarely idle between its calls here.
//
//	go test -run '^$' -bench StdioLayersProcess -benchtime 2000x ./test/multiprocess/
func BenchmarkStdioLayersProcess(b *testing.B) {
	ctx := context.Background()
	c := startStdioBench(b)
	direct := mcpgatewaytest.DirectEverything(b)
	health := healthpb.NewHealthClient(c.Conn())
	params := &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "hello"}}
	execReq := &toolsv1.ExecuteToolRequest{Name: "bench_echo", Arguments: `{"message":"hello"}`}
	gwReq := &pb.CallToolRequest{Name: "bench_echo", Arguments: `{"message":"hello"}`}
	layers := []struct {
		name string
		call func() error
	}{
		{"direct", func() error { _, err := direct.CallTool(ctx, params); return err }},
		{"exec", func() error { _, err := c.Tools.ExecuteTool(ctx, execReq); return err }},
		{"gw", func() error { _, err := c.Gateway.CallTool(ctx, gwReq); return err }},
		{"health", func() error { _, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); return err }},
	}
	timed := func(call func() error) time.Duration {
		start := time.Now()
		if err := call(); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	for range 20 { // warm every path
		for _, l := range layers {
			timed(l.call)
		}
	}
	took := make([][]time.Duration, len(layers))
	i := 0
	for b.Loop() {
		for j := range layers {
			k := (i + j) % len(layers)
			took[k] = append(took[k], timed(layers[k].call))
		}
		i++
	}
	medians := make([]time.Duration, len(layers))
	for k, l := range layers {
		s := slices.Clone(took[k])
		slices.Sort(s)
		medians[k] = s[len(s)/2]
		b.ReportMetric(float64(medians[k].Microseconds()), l.name+"-µs")
	}
	b.ReportMetric(float64(medians[1])/float64(medians[0]), "exec-ratio")
	b.ReportMetric(float64(medians[2])/float64(medians[0]), "gw-ratio")
}

// startStdioBench starts `hermes serve` with the everything server over stdio added as "bench"
// (its tools prefixed bench_) and returns a client of it.
func startStdioBench(b *testing.B) *client.Client {
	ctx := context.Background()
	model, err := scripted.New(scripted.Sequence())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(model.Close)
	env := []string{"HERMES_MCPGATEWAY_STDIO_ALLOW=" + strings.Join(mcpgatewaytest.StdioAllow(), ",")}
	if kv := os.Getenv("BENCH_HERMES_ENV"); kv != "" {
		env = append(env, kv)
	}
	p, err := cluster.StartMonolith(ctx, hermesBin, b.TempDir(), model.URL(), "scripted-bench", env)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	c, err := client.Dial(ctx, p.Addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	spec := mcpgatewaytest.EverythingStdio(b, "bench", "bench")
	if resp, err := c.Gateway.AddServer(ctx, &pb.AddServerRequest{Spec: spec, Wait: true}); err != nil || resp.GetServer().GetState() != pb.ServerState_SERVER_STATE_READY {
		b.Fatalf("AddServer: %v %v\n%s", resp, err, p.Log(4000))
	}
	return c
}
