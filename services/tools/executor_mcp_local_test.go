package tools

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/hermes-agent/hermes/internal/auth"
	"github.com/hermes-agent/hermes/internal/errclass"
	"github.com/hermes-agent/hermes/internal/rpc"
	"github.com/hermes-agent/hermes/internal/testenv"
	mcpgatewayv1 "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// TestMCPLocalMatchesGRPC runs ExecuteTool of an MCP tool with the gateway reached three ways —
// called directly in process (LocalMCP over rpc.LocalUnary, as hermes serve does), on the
// in-process gRPC channel (as before), and over the network (another process's gateway) — and
// checks the caller gets the same result every way: outputs, failed results, the gateway's
// errors (classified by the shared plumbing), a panic in the gateway (recovered, INTERNAL) and
// the deadline. The gateway sees the same request and, in process, the same principal.
func TestMCPLocalMatchesGRPC(t *testing.T) {
	var script atomic.Pointer[func(n int64, ctx context.Context, req *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error)]
	gw := &fakeGateway{noRecord: true, script: func(n int64, ctx context.Context, req *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error) {
		return (*script.Load())(n, ctx, req)
	}}
	srv := rpc.NewServer(rpc.ServerOptions{Logger: quietLogger(), ShutdownTimeout: time.Second})
	srv.Register(&mcpgatewayv1.MCPGatewayService_ServiceDesc, gw)
	var ways map[string]MCPCaller
	var way atomic.Value
	svc := newTestService(t, testBoltStore(t), Options{MCP: func() (MCPCaller, error) { return ways[way.Load().(string)], nil }})
	srv.Register(&toolsv1.ToolService_ServiceDesc, svc)
	channel := mcpgatewayv1.NewMCPGatewayServiceClient(srv.InProcess())
	ways = map[string]MCPCaller{
		"local":   LocalMCP(rpc.LocalUnary(srv, mcpgatewayv1.MCPGatewayService_CallTool_FullMethodName, gw.CallTool), channel),
		"channel": channel,
		"network": mcpgatewayv1.NewMCPGatewayServiceClient(testenv.Serve(t, srv)),
	}
	c := toolsv1.NewToolServiceClient(srv.InProcess())
	spec := mcpSpec("github_list_issues")
	spec.Timeout = dur(time.Second)
	mustRegister(t, c, spec)

	// seen is what the gateway's handler saw: the request's fields, its principal (in process
	// only: the network path of this test has no authentication), the deadline.
	seen := func(ctx context.Context, req *mcpgatewayv1.CallToolRequest, principal bool) string {
		p, _ := auth.FromContext(ctx)
		if !principal {
			p.Name = ""
		}
		dl, ok := ctx.Deadline()
		return fmt.Sprintf(`{"server":%q,"tool":%q,"args":%s,"user":%q,"principal":%q,"deadline":%v}`,
			req.GetServer(), req.GetTool(), req.GetArguments(), req.GetUserId(), p.Name, ok && time.Until(dl) <= time.Second)
	}
	tests := []struct {
		name   string
		script func(n int64, ctx context.Context, req *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error)
		// networkDiffers: the network path is not compared (what the handler sees differs).
		networkDiffers bool
	}{
		{"what the gateway sees, in process", func(_ int64, ctx context.Context, req *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error) {
			return &mcpgatewayv1.CallToolResponse{Success: true, Structured: true, Output: seen(ctx, req, true)}, nil
		}, true},
		{"what the gateway sees", func(_ int64, ctx context.Context, req *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error) {
			return &mcpgatewayv1.CallToolResponse{Success: true, Structured: true, Output: seen(ctx, req, false)}, nil
		}, false},
		{"text and media", func(int64, context.Context, *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error) {
			return &mcpgatewayv1.CallToolResponse{Success: true, Output: "a chart",
				Contents: []*mcpgatewayv1.Content{{Type: "image", MimeType: "image/png", Data: []byte("\x89PNG")}}}, nil
		}, false},
		{"a failed result", func(int64, context.Context, *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error) {
			return &mcpgatewayv1.CallToolResponse{ErrorCode: "tool_error", Output: "no such repo", MayHaveRun: true}, nil
		}, false},
		{"the server is unavailable, retried", func(n int64, _ context.Context, _ *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error) {
			if n%2 == 1 {
				return &mcpgatewayv1.CallToolResponse{ErrorCode: "unavailable", Output: "not connected"}, nil
			}
			return &mcpgatewayv1.CallToolResponse{Success: true, Output: "ok"}, nil
		}, false},
		{"a status error", func(int64, context.Context, *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error) {
			return nil, status.Error(codes.FailedPrecondition, "not now")
		}, false},
		{"a classified error", func(int64, context.Context, *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error) {
			return nil, errclass.New(errclass.NotFound, "no server github", errors.New("backend detail"))
		}, false},
		{"an unclassified error is INTERNAL", func(int64, context.Context, *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error) {
			return nil, errors.New("a bug's detail that must not leave")
		}, false},
		{"a panic is recovered", func(int64, context.Context, *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error) {
			var m map[string]int
			m["boom"]++
			return nil, nil
		}, false},
		// Over the network gRPC sends an empty response (a failed result without a message).
		{"neither a result nor an error", func(int64, context.Context, *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error) {
			return nil, nil
		}, true},
		{"hangs until the deadline", func(_ int64, ctx context.Context, _ *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}, false},
	}
	// Timings differ from run to run.
	opts := []cmp.Option{protocmp.Transform(), protocmp.IgnoreFields(&toolsv1.ToolResult{}, "duration")}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			script.Store(&tt.script)
			results := map[string]*toolsv1.ToolResult{}
			for _, w := range []string{"channel", "local", "network"} {
				if w == "network" && tt.networkDiffers {
					continue
				}
				way.Store(w)
				gw.calls.Store(0)
				res := execute(t, c, &toolsv1.ExecuteToolRequest{Name: "github_list_issues", Arguments: `{"repo":"hermes"}`, UserId: "用户-7"})
				results[w] = res
				if w != "channel" {
					if diff := cmp.Diff(results["channel"], res, opts...); diff != "" {
						t.Errorf("%s differs from the channel (-channel +%s):\n%s", w, w, diff)
					}
				}
			}
			t.Logf("%v", results["local"])
		})
	}
}
