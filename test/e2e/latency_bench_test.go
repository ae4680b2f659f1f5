package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	"github.com/hermes-agent/hermes/services/mcpgateway/mcpgatewaytest"
)

// BenchmarkStdioInterleaved measures issue 27's latency ratio in one run
// (mcpgatewaytest.BenchStdioInterleaved), with Hermes in the benchmark's process: the Go SDK
// client's allocations and garbage collections are Hermes' too, and Hermes' goroutines share
// the process's processors with the client's. BenchmarkStdioInterleavedProcess in
// test/multiprocess runs Hermes as its own `hermes serve` process.
//
//	go test -run '^$' -bench BenchmarkStdioInterleaved -benchtime 300x ./test/e2e/
func BenchmarkStdioInterleaved(b *testing.B) {
	h := startHermes(b, b.TempDir())
	spec := mcpgatewaytest.EverythingStdio(b, "bench", "bench")
	if resp, err := h.gw.AddServer(context.Background(), &pb.AddServerRequest{Spec: spec, Wait: true}); err != nil || resp.GetServer().GetState() != pb.ServerState_SERVER_STATE_READY {
		b.Fatalf("AddServer: %v %v", resp, err)
	}
	mcpgatewaytest.BenchStdioInterleaved(b, h.tools, "bench_echo")
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
