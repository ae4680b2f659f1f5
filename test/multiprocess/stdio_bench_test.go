package multiprocess

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/hermes-agent/hermes/client"
	"github.com/hermes-agent/hermes/internal/model/scripted"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
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
	mcpgatewaytest.BenchStdioInterleaved(b, c.Tools, "bench_echo")
}
