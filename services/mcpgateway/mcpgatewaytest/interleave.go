package mcpgatewaytest

import (
	"context"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// EverythingStdio is the spec of the reference everything server over stdio, its tools under
// prefix.
func EverythingStdio(t testing.TB, name, prefix string) *pb.ServerSpec {
	script := NodeScript(t, "@modelcontextprotocol/server-everything/dist/index.js")
	return &pb.ServerSpec{Name: name, Prefix: prefix, Transport: &pb.ServerSpec_Stdio{Stdio: &pb.StdioTransport{Command: Node(t), Args: []string{script, "stdio"}}}}
}

// DirectEverything is the benchmarks' direct call: the official Go SDK client connected to the
// reference everything server over stdio, in a node process of its own, closed when b ends.
func DirectEverything(b *testing.B) *mcp.ClientSession {
	script := NodeScript(b, "@modelcontextprotocol/server-everything/dist/index.js")
	direct, err := mcp.NewClient(&mcp.Implementation{Name: "direct", Version: "1"}, nil).
		Connect(context.Background(), &mcp.CommandTransport{Command: exec.Command(Node(b), script, "stdio")}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = direct.Close() })
	return direct
}

// BenchStdioInterleaved is issue 27's latency comparison: each iteration calls the everything
// server's echo over stdio once directly with the official Go SDK client (its own node process,
// connected before the timer starts) and once with ExecuteTool of tool (a tool of a Hermes
// gateway that runs the same server over stdio), with the same arguments, alternating which goes
// first so both see the same machine load. It reports the median of each and their ratio.
func BenchStdioInterleaved(b *testing.B, tools toolsv1.ToolServiceClient, tool string) {
	ctx := context.Background()
	direct := DirectEverything(b)
	params := &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "hello"}}
	req := &toolsv1.ExecuteToolRequest{Name: tool, Arguments: `{"message":"hello"}`}
	callDirect := func() time.Duration {
		start := time.Now()
		if r, err := direct.CallTool(ctx, params); err != nil || r.IsError {
			b.Fatal(err, r)
		}
		return time.Since(start)
	}
	callHermes := func() time.Duration {
		start := time.Now()
		if r, err := tools.ExecuteTool(ctx, req); err != nil || !r.GetResult().GetSuccess() {
			b.Fatal(err, r)
		}
		return time.Since(start)
	}
	for range 20 { // warm both paths
		callDirect()
		callHermes()
	}
	var d, h []time.Duration
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			d, h = append(d, callDirect()), append(h, callHermes())
		} else {
			h, d = append(h, callHermes()), append(d, callDirect())
		}
		i++
	}
	md, mh := median(d), median(h)
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
