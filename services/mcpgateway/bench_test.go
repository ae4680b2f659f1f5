package mcpgateway

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	"github.com/hermes-agent/hermes/services/mcpgateway/mcpgatewaytest"
)

// BenchmarkCallTool compares one tools/call of the everything server's echo over stdio made
// directly with the Go SDK client against the same call through the gateway's gRPC CallTool
// (lookup, timeout, normalization and cleaning, gRPC over bufconn). The ratio is the gateway's
// cost.
func BenchmarkCallTool(b *testing.B) {
	args := map[string]any{"message": "hello"}
	b.Run("direct-sdk", func(b *testing.B) {
		cmd := exec.Command(mcpgatewaytest.Node(b), mcpgatewaytest.NodeScript(b, "@modelcontextprotocol/server-everything/dist/index.js"), "stdio")
		// The same capabilities as the gateway's client (none), so the server does the same work.
		client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}})
		sess, err := client.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer sess.Close()
		b.ResetTimer()
		for b.Loop() {
			res, err := sess.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: args})
			if err != nil || res.IsError {
				b.Fatal(err, res)
			}
		}
	})
	b.Run("gateway", func(b *testing.B) {
		c, _ := startGateway(b, testConfig(), Options{Logger: testLogger(b)})
		addReady(b, c, everythingStdio(b, "ev", "ev"))
		raw, _ := json.Marshal(args)
		b.ResetTimer()
		for b.Loop() {
			r, err := c.CallTool(context.Background(), &pb.CallToolRequest{Name: "ev_echo", Arguments: string(raw)})
			if err != nil || !r.GetSuccess() {
				b.Fatal(err, r)
			}
		}
	})
}

// BenchmarkCleanText measures cleaning 64 KiB of text of each kind (SetBytes: MB/s).
func BenchmarkCleanText(b *testing.B) {
	para := "Noodles, dumplings and tea\u200b are served until 22:00. <b>Book</b> ahead on weekends.\n"
	inputs := map[string]struct{ text, mime string }{
		"plain": {strings.Repeat(strings.ReplaceAll(para, "<b>", ""), 64<<10/len(para)), "text/plain"},
		"html":  {"<!doctype html><html><body>" + strings.Repeat("<div><p>"+para+"</p><script>x()</script></div>", 64<<10/(len(para)+40)) + "</body></html>", "text/html"},
		"json":  {"[" + strings.Repeat(`{"dish": "noodles", "price": 12.5, "tags": ["hot", "spicy"]},`+"\n  ", 64<<10/70) + "{}]", "application/json"},
	}
	for name, in := range inputs {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(in.text)))
			opts := CleanOptions{MaxBytes: 64 << 10, CompactJSONOver: 1024}
			for b.Loop() {
				CleanText(in.text, in.mime, opts)
			}
		})
	}
}

// BenchmarkToolName measures naming a tool, clamped and not.
func BenchmarkToolName(b *testing.B) {
	b.Run("short", func(b *testing.B) {
		for b.Loop() {
			ToolName("github", "create_issue")
		}
	})
	b.Run("clamped", func(b *testing.B) {
		long := strings.Repeat("search.repositories.", 5)
		for b.Loop() {
			ToolName("github", long)
		}
	})
}
