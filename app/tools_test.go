package app

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// TestToolsCallLocalGateway: with the tool service and the MCP gateway in one process, the tool
// service calls the gateway's CallTool directly (useLocalGateway) and an MCP tool's call reaches
// it; with --mcpgateway-addr the gateway is another process's and nothing local is used.
func TestToolsCallLocalGateway(t *testing.T) {
	start := func(args ...string) *App {
		t.Helper()
		var cfg Config
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		cfg.RegisterFlags(fs)
		if err := fs.Parse(append([]string{"--listen=127.0.0.1:0", "--data-dir=" + t.TempDir()}, args...)); err != nil {
			t.Fatal(err)
		}
		a, err := New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = a.Stop() })
		return a
	}

	a := start("--target=tools,mcpgateway")
	if a.localGateway.Load() == nil {
		t.Fatal("the tool service does not call the gateway of its process directly")
	}
	a.Start()
	conn, err := a.Conn(TargetTools)
	if err != nil {
		t.Fatal(err)
	}
	c := toolsv1.NewToolServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.RegisterTool(ctx, &toolsv1.RegisterToolRequest{Spec: &toolsv1.ToolSpec{
		Name: "gone_tool", Description: "an MCP tool whose server is not connected", InputSchema: `{"type":"object"}`,
		Executor: &toolsv1.ToolSpec_Mcp{Mcp: &toolsv1.MCPExecutor{Server: "gone", Tool: "tool"}},
	}}); err != nil {
		t.Fatal(err)
	}
	resp, err := c.ExecuteTool(ctx, &toolsv1.ExecuteToolRequest{Name: "gone_tool", Arguments: `{}`, UserId: "u1"})
	if err != nil {
		t.Fatal(err)
	}
	// The gateway itself answered: it knows no such tool.
	if r := resp.GetResult(); r.GetSuccess() || r.GetError().GetCode() != toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE || !strings.Contains(r.GetError().GetMessage(), "no longer offers") {
		t.Errorf("result %v, want the gateway's unknown tool", r)
	}

	if b := start("--target=tools,mcpgateway", "--mcpgateway-addr=127.0.0.1:1"); b.localGateway.Load() != nil {
		t.Error("a gateway at --mcpgateway-addr is called in process")
	}
}
