package e2e

import (
	"context"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
	"github.com/hermes-agent/hermes/services/mcpgateway/mcpgatewaytest"
)

// BenchmarkStdioInterleaved measures issue 27's latency ratio in one run: each iteration calls
// the everything server's echo over stdio once directly with the Go SDK client and once through
// Hermes (ExecuteTool over gRPC, the tool service, the gateway), alternating which goes first,
// so both see the same machine load. It reports the median of each and their ratio.
//
//	go test -run '^$' -bench BenchmarkStdioInterleaved -benchtime 300x ./test/e2e/
func BenchmarkStdioInterleaved(b *testing.B) {
	ctx := context.Background()
	script := mcpgatewaytest.NodeScript(b, "@modelcontextprotocol/server-everything/dist/index.js")
	direct, err := mcp.NewClient(&mcp.Implementation{Name: "direct", Version: "1"}, nil).
		Connect(ctx, &mcp.CommandTransport{Command: exec.Command(mcpgatewaytest.Node(b), script, "stdio")}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer direct.Close()
	h := startHermes(b, b.TempDir())
	spec := &pb.ServerSpec{Name: "bench", Prefix: "bench", Transport: &pb.ServerSpec_Stdio{Stdio: &pb.StdioTransport{Command: mcpgatewaytest.Node(b), Args: []string{script, "stdio"}}}}
	if resp, err := h.gw.AddServer(ctx, &pb.AddServerRequest{Spec: spec, Wait: true}); err != nil || resp.GetServer().GetState() != pb.ServerState_SERVER_STATE_READY {
		b.Fatalf("AddServer: %v %v", resp, err)
	}
	params := &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "hello"}}
	req := &toolsv1.ExecuteToolRequest{Name: "bench_echo", Arguments: `{"message":"hello"}`}
	callDirect := func() time.Duration {
		start := time.Now()
		if r, err := direct.CallTool(ctx, params); err != nil || r.IsError {
			b.Fatal(err, r)
		}
		return time.Since(start)
	}
	callHermes := func() time.Duration {
		start := time.Now()
		if r, err := h.tools.ExecuteTool(ctx, req); err != nil || !r.GetResult().GetSuccess() {
			b.Fatal(err, r)
		}
		return time.Since(start)
	}
	for range 20 { // warm both paths
		callDirect()
		callHermes()
	}
	var d, hm []time.Duration
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			d, hm = append(d, callDirect()), append(hm, callHermes())
		} else {
			hm, d = append(hm, callHermes()), append(d, callDirect())
		}
		i++
	}
	md, mh := median(d), median(hm)
	b.ReportMetric(float64(md.Microseconds()), "direct-µs")
	b.ReportMetric(float64(mh.Microseconds()), "hermes-µs")
	b.ReportMetric(float64(mh)/float64(md), "ratio")
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
