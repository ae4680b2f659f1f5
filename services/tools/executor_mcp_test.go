package tools

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	mcpgatewayv1 "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// fakeGateway is a gRPC test server implementing MCPGatewayService's CallTool from a script: it
// answers call n with script(n, ctx, request) and records the requests.
type fakeGateway struct {
	mcpgatewayv1.UnimplementedMCPGatewayServiceServer
	script   func(n int64, ctx context.Context, req *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error)
	calls    atomic.Int64
	mu       sync.Mutex
	requests []*mcpgatewayv1.CallToolRequest
	// noRecord: requests are not kept (benchmarks).
	noRecord bool
}

func (g *fakeGateway) CallTool(ctx context.Context, req *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error) {
	n := g.calls.Add(1)
	if !g.noRecord {
		g.mu.Lock()
		g.requests = append(g.requests, req)
		g.mu.Unlock()
	}
	return g.script(n, ctx, req)
}

// startGateway serves g on loopback TCP and returns a connected client.
func startGateway(t *testing.T, g *fakeGateway) mcpgatewayv1.MCPGatewayServiceClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	mcpgatewayv1.RegisterMCPGatewayServiceServer(srv, g)
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(); srv.Stop() })
	return mcpgatewayv1.NewMCPGatewayServiceClient(conn)
}

func mcpSpec(name string) *toolsv1.ToolSpec {
	return &toolsv1.ToolSpec{
		Name:        name,
		Description: "an MCP tool",
		InputSchema: `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"repo":{"type":"string"}},"required":["repo"]}`,
		Executor:    &toolsv1.ToolSpec_Mcp{Mcp: &toolsv1.MCPExecutor{Server: "github", Tool: "list_issues"}},
	}
}

func TestMCPExecutor(t *testing.T) {
	tests := []struct {
		name         string
		script       func(n int64, ctx context.Context, req *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error)
		timeout      time.Duration
		annotations  *toolsv1.ToolAnnotations
		outputSchema string
		wantSuccess  bool
		wantMayRun   bool
		wantCut      bool
		wantOutput   string
		wantCode     toolsv1.ErrorCode
		wantAttempts int32
		wantMsg      string
		wantAuthURL  string
	}{
		{
			name: "structured output",
			script: func(int64, context.Context, *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error) {
				return &mcpgatewayv1.CallToolResponse{Success: true, Structured: true, Output: `{ "issues": [1, 2] }`}, nil
			},
			wantSuccess: true, wantOutput: `{"issues":[1,2]}`, wantAttempts: 1,
		},
		{
			name: "text with an image",
			script: func(int64, context.Context, *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error) {
				return &mcpgatewayv1.CallToolResponse{Success: true, Output: "2 open issues", Contents: []*mcpgatewayv1.Content{{Type: "image", MimeType: "image/png", Size: 1234}}}, nil
			},
			wantSuccess: true, wantOutput: `"2 open issues\n[image image/png 1234 bytes]"`, wantAttempts: 1,
		},
		{
			name: "tool error (isError)",
			script: func(int64, context.Context, *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error) {
				return &mcpgatewayv1.CallToolResponse{Success: false, Output: "repository not found"}, nil
			},
			wantCode: toolsv1.ErrorCode_ERROR_CODE_EXECUTION, wantAttempts: 1, wantMsg: "repository not found",
		},
		{
			name: "gateway unavailable twice, then ok",
			script: func(n int64, _ context.Context, _ *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error) {
				if n <= 2 {
					return nil, status.Error(codes.Unavailable, "server reconnecting")
				}
				return &mcpgatewayv1.CallToolResponse{Success: true, Output: "ok"}, nil
			},
			wantSuccess: true, wantOutput: `"ok"`, wantAttempts: 3,
		},
		{
			name: "MCP server down (error_code unavailable) is retried",
			script: func(int64, context.Context, *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error) {
				return &mcpgatewayv1.CallToolResponse{Success: false, ErrorCode: "unavailable", Output: "connection refused"}, nil
			},
			wantCode: toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE, wantAttempts: 3, wantMsg: `the MCP server "github" is unavailable: connection refused (3 attempts)`,
		},
		{
			name: "JSON text reaches the model as JSON, not as an escaped string",
			script: func(int64, context.Context, *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error) {
				return &mcpgatewayv1.CallToolResponse{Success: true, Output: `{"count": 1, "items": ["a"]}`}, nil
			},
			wantSuccess: true, wantOutput: `{"count":1,"items":["a"]}`, wantAttempts: 1,
		},
		{
			name: "plain text is one JSON string",
			script: func(int64, context.Context, *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error) {
				return &mcpgatewayv1.CallToolResponse{Success: true, Output: "The sum of 2 and 3 is 5."}, nil
			},
			wantSuccess: true, wantOutput: `"The sum of 2 and 3 is 5."`, wantAttempts: 1,
		},
		{
			name: "connection broke during the call: a tool that may have acted is not retried",
			script: func(int64, context.Context, *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error) {
				return &mcpgatewayv1.CallToolResponse{ErrorCode: "unavailable", MayHaveRun: true, Output: "the connection broke during the call"}, nil
			},
			annotations: &toolsv1.ToolAnnotations{DestructiveHint: ptr(true)},
			wantCode:    toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE, wantAttempts: 1, wantMayRun: true, wantMsg: "may have acted",
		},
		{
			name: "connection broke during the call: a read-only tool is retried",
			script: func(n int64, _ context.Context, _ *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error) {
				if n == 1 {
					return &mcpgatewayv1.CallToolResponse{ErrorCode: "unavailable", MayHaveRun: true, Output: "broke"}, nil
				}
				return &mcpgatewayv1.CallToolResponse{Success: true, Output: "ok"}, nil
			},
			annotations: &toolsv1.ToolAnnotations{ReadOnlyHint: ptr(true)},
			wantSuccess: true, wantOutput: `"ok"`, wantAttempts: 2, wantMayRun: true,
		},
		{
			name: "a rejected call that may have run says so",
			script: func(int64, context.Context, *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error) {
				return &mcpgatewayv1.CallToolResponse{ErrorCode: "rejected", MayHaveRun: true, Output: "internal error"}, nil
			},
			wantCode: toolsv1.ErrorCode_ERROR_CODE_EXECUTION, wantAttempts: 1, wantMayRun: true,
		},
		{
			name: "a preview cut to the gateway's cap is not checked against the output schema",
			script: func(int64, context.Context, *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error) {
				return &mcpgatewayv1.CallToolResponse{Success: true, Truncated: true, Output: "[structured content of 400000 bytes …]"}, nil
			},
			outputSchema: `{"type":"object","required":["data"]}`,
			wantSuccess:  true, wantOutput: `"[structured content of 400000 bytes …]"`, wantAttempts: 1, wantCut: true,
		},
		{
			name: "tool gone from the server",
			script: func(int64, context.Context, *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error) {
				return &mcpgatewayv1.CallToolResponse{Success: false, ErrorCode: "unknown_tool"}, nil
			},
			wantCode: toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE, wantAttempts: 1, wantMsg: "no longer offers",
		},
		{
			name: "unknown server is not retried",
			script: func(int64, context.Context, *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error) {
				return nil, status.Error(codes.NotFound, "no server github")
			},
			wantCode: toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE, wantAttempts: 1, wantMsg: "no server github",
		},
		{
			name: "the user has not connected an account: the URL reaches the model, no retry",
			script: func(int64, context.Context, *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error) {
				return &mcpgatewayv1.CallToolResponse{ErrorCode: "authorization_required", AuthorizationUrl: "https://as.example/authorize?state=s",
					Output: "Ask the user to connect their account by opening this link, then try again: https://as.example/authorize?state=s"}, nil
			},
			wantCode: toolsv1.ErrorCode_ERROR_CODE_EXECUTION, wantAttempts: 1, wantMsg: "connect their account by opening this link, then try again: https://as.example/authorize?state=s",
			wantAuthURL: "https://as.example/authorize?state=s",
		},
		{
			name: "hangs until the deadline",
			script: func(_ int64, ctx context.Context, _ *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			},
			timeout:  300 * time.Millisecond,
			wantCode: toolsv1.ErrorCode_ERROR_CODE_TIMEOUT, wantAttempts: 1, wantMsg: "did not finish within its timeout of 300ms",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := &fakeGateway{script: tt.script}
			gw := startGateway(t, g)
			c, _ := newClient(t, Options{MCP: func() (MCPCaller, error) { return gw, nil }})
			spec := mcpSpec("github_list_issues")
			if tt.timeout > 0 {
				spec.Timeout = dur(tt.timeout)
			}
			spec.Annotations, spec.OutputSchema = tt.annotations, tt.outputSchema
			mustRegister(t, c, spec)
			res := execute(t, c, &toolsv1.ExecuteToolRequest{Name: "github_list_issues", Arguments: `{"repo":"hermes"}`, UserId: "用户-7"})
			if res.GetSuccess() != tt.wantSuccess || res.GetError().GetCode() != tt.wantCode || res.GetAttempts() != tt.wantAttempts {
				t.Fatalf("success=%v code=%v attempts=%d (%s); want %v %v %d", res.GetSuccess(), res.GetError().GetCode(), res.GetAttempts(),
					res.GetError().GetMessage(), tt.wantSuccess, tt.wantCode, tt.wantAttempts)
			}
			if tt.wantSuccess && res.GetOutput() != tt.wantOutput {
				t.Errorf("output %s, want %s", res.GetOutput(), tt.wantOutput)
			}
			if res.GetMayHaveRun() != tt.wantMayRun || res.GetTruncated() != tt.wantCut {
				t.Errorf("may_have_run %v truncated %v, want %v %v", res.GetMayHaveRun(), res.GetTruncated(), tt.wantMayRun, tt.wantCut)
			}
			if tt.wantMsg != "" && !strings.Contains(res.GetError().GetMessage(), tt.wantMsg) {
				t.Errorf("message %q lacks %q", res.GetError().GetMessage(), tt.wantMsg)
			}
			if got := res.GetError().GetAuthorizationUrl(); got != tt.wantAuthURL {
				t.Errorf("authorization_url %q, want %q", got, tt.wantAuthURL)
			}
			g.mu.Lock()
			defer g.mu.Unlock()
			if int64(len(g.requests)) != int64(tt.wantAttempts) {
				t.Fatalf("gateway saw %d calls, want %d", len(g.requests), tt.wantAttempts)
			}
			r := g.requests[0]
			if r.GetServer() != "github" || r.GetTool() != "list_issues" || r.GetArguments() != `{"repo":"hermes"}` || r.GetUserId() != "用户-7" {
				t.Errorf("request %v", r)
			}
			if d := r.GetTimeout().AsDuration(); d <= 0 || d > 10*time.Second {
				t.Errorf("request timeout %v, want the remaining budget", d)
			}
		})
	}
}

func TestMCPGatewayMissing(t *testing.T) {
	tests := map[string]func() (MCPCaller, error){
		"no gateway configured": nil,
		"gateway not reachable": func() (MCPCaller, error) { return nil, errors.New("the mcpgateway service is not in this process") },
	}
	for name, connect := range tests {
		t.Run(name, func(t *testing.T) {
			c, _ := newClient(t, Options{MCP: connect})
			mustRegister(t, c, mcpSpec("github_list_issues"))
			res := execute(t, c, &toolsv1.ExecuteToolRequest{Name: "github_list_issues", Arguments: `{"repo":"x"}`})
			if res.GetError().GetCode() != toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE || res.GetAttempts() != 1 {
				t.Errorf("result %v", res)
			}
		})
	}
	// A gateway address nobody listens on answers unavailable quickly, it does not hang.
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := lis.Addr().String()
	_ = lis.Close()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	gw := mcpgatewayv1.NewMCPGatewayServiceClient(conn)
	c, _ := newClient(t, Options{MCP: func() (MCPCaller, error) { return gw, nil }})
	mustRegister(t, c, mcpSpec("github_list_issues"))
	res := execute(t, c, &toolsv1.ExecuteToolRequest{Name: "github_list_issues", Arguments: `{"repo":"x"}`})
	if res.GetError().GetCode() != toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE {
		t.Errorf("result %v", res)
	}
}

// TestMCPRegistrationBySource: the gateway registers its tools with source "mcp:<server>" and the
// server's schema, which may carry any dialect's $schema.
func TestMCPRegistrationBySource(t *testing.T) {
	c, _ := newClient(t, Options{})
	for _, schema := range []string{
		`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{"q":{"type":"string"}}}`,
		`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"q":{"type":"string"}},"additionalProperties":false}`,
		`{"type":"object"}`,
	} {
		spec := mcpSpec("github_search")
		spec.InputSchema = schema
		resp, err := c.RegisterTool(ctxTimeout(t, 5*time.Second), &toolsv1.RegisterToolRequest{Spec: spec, Source: "mcp:github"})
		if err != nil || resp.GetTool().GetSource() != "mcp:github" {
			t.Errorf("register %s: %v", schema, err)
		}
	}
	_, err := c.RegisterTool(ctxTimeout(t, 5*time.Second), &toolsv1.RegisterToolRequest{Spec: mcpSpec("x"), Source: "somewhere"})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("unknown source: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

// TestMCPAuthorizationRequiredNotRecorded: a call refused until the user connects an account is
// not the tool's answer, so it is not recorded for an idempotency key: the same call with the
// same key runs once the user has connected.
func TestMCPAuthorizationRequiredNotRecorded(t *testing.T) {
	g := &fakeGateway{script: func(n int64, _ context.Context, _ *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error) {
		if n == 1 {
			return &mcpgatewayv1.CallToolResponse{ErrorCode: "authorization_required", AuthorizationUrl: "https://as.example/authorize?state=s", Output: "connect your account"}, nil
		}
		return &mcpgatewayv1.CallToolResponse{Success: true, Output: "3 issues"}, nil
	}}
	gw := startGateway(t, g)
	c, _ := newClient(t, Options{MCP: func() (MCPCaller, error) { return gw, nil }})
	spec := mcpSpec("github_list_issues")
	spec.Idempotent = true
	mustRegister(t, c, spec)
	req := &toolsv1.ExecuteToolRequest{Name: "github_list_issues", Arguments: `{"repo":"hermes"}`, UserId: "alice", IdempotencyKey: "k1"}
	if res := execute(t, c, req); res.GetSuccess() || res.GetError().GetAuthorizationUrl() == "" {
		t.Fatalf("first call: %v", res)
	}
	if res := execute(t, c, req); !res.GetSuccess() || res.GetReplayed() || res.GetOutput() != `"3 issues"` {
		t.Fatalf("call after connecting: %v, want the tool's answer", res)
	}
}
